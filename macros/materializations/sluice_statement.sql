{#- One statement of a lake merge: run now under the runner (job none), which commits the
    merge checkpoint around dbt; in a plain `dbt run` collected into `committed`, which sluice
    commits with the checkpoint (sluice_apply_change_set). -#}
{% macro sluice_statement(name, sql, job, committed) -%}
    {%- if job is none -%}
        {% call statement(name) -%} {{ sql }} {%- endcall %}
    {%- else -%}
        {%- do committed.append(sql) -%}
    {%- endif -%}
{%- endmacro %}
