{#
    Whether a table exists now, asked of the catalog rather than dbt's relation cache: sluice
    creates tables dbt's cache never hears of (a job's tombstone table, a lake table another
    process built). False at parse time. A mart on a lake table stays empty until the lake
    exists (its job may be held by another run when `dbt run` reaches it).
#}
{% macro sluice_relation_exists(relation) -%}
    {%- if not execute -%}
        {{ return(false) }}
    {%- endif -%}
    {%- set found = run_query("show tables in " ~ relation.schema ~ " like '"
                              ~ relation.identifier ~ "'") -%}
    {{ return(found.rows | length > 0) }}
{%- endmacro %}
