{#
    A var of the lake merge (sluice_batch_id, sluice_skip, sluice_error_table,
    sluice_tombstone_table, sluice_changes_table): a dbt var under the runner (`sluice run`
    passes them), or in a plain `dbt run` the batch this model is merging now, from sluice's
    plan (python_ingest/steps/transform.py, through the dbt_sluice plugin). `default` when
    neither has it (parse time, a run outside sluice's plugin).
#}
{% macro sluice_var(name, default=none) -%}
    {%- set value = var(name, none) -%}
    {%- if value is none and execute and adapter.sluice_var is defined -%}
        {%- set value = adapter.sluice_var(name) -%}
    {%- endif -%}
    {{ return(default if value is none else value) }}
{%- endmacro %}
