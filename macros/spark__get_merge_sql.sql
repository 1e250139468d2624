{#
    dbt-spark's merge for incremental models, plus deletes: a model configured with
    `sluice_delete_when` (a SQL condition on its own columns) deletes the target row of every
    source row matching it and never inserts such a row; the others merge as dbt-spark does.
    A mart on a lake table needs this: the lake drops deleted rows, so the mart learns of them
    from the job's tombstones and must remove its copy (models/marts/). dbt-spark accepts no
    custom incremental strategy, so this overrides its `get_merge_sql` for the project and
    hands every model without the setting to dbt-spark's own.
#}
{% macro spark__get_merge_sql(target, source, unique_key, dest_columns, incremental_predicates) -%}
    {%- set delete_when = config.get('sluice_delete_when') -%}
    {%- if delete_when is none or unique_key is none -%}
        {{ return(dbt_spark.spark__get_merge_sql(target, source, unique_key, dest_columns,
                                                 incremental_predicates)) }}
    {%- endif -%}
    {%- set keys = [unique_key] if unique_key is string else unique_key -%}
    {%- set predicates = [] if incremental_predicates is none else [] + incremental_predicates -%}
    {%- for key in keys -%}
        {%- do predicates.append('dbt_internal_source.' ~ key ~ ' = dbt_internal_dest.' ~ key) -%}
    {%- endfor -%}
    {%- set columns = [] -%}
    {%- for column in adapter.get_columns_in_relation(target) -%}
        {%- if not column.name.startswith('_hoodie_') -%}
            {%- do columns.append(column.name) -%}
        {%- endif -%}
    {%- endfor -%}
    merge into {{ target }} as dbt_internal_dest
    using {{ source }} as dbt_internal_source
    on {{ predicates | join(' and ') }}
    when matched and ({{ delete_when }}) then delete
    {#- conditional: Hudi applies an unconditional update before a conditional delete #}
    when matched and not ({{ delete_when }}) then update set
        {%- for column in columns %}
        {{ column }} = dbt_internal_source.{{ column }}{{ ',' if not loop.last }}
        {%- endfor %}
    when not matched and not ({{ delete_when }}) then insert
        ({{ columns | join(', ') }})
        values ({% for column in columns %}dbt_internal_source.{{ column }}{{ ', ' if not loop.last }}{% endfor %})
{%- endmacro %}
