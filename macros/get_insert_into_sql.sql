{#
    dbt-spark's append of an incremental model (staging converters), overridden so that the
    insert lists the target's own columns only: a Hudi table also has Hudi's _hoodie_* meta
    columns, which the new rows do not carry and Hudi fills itself (hudi #8321,
    dbt-spark #791), after widening the target's columns whose type the new rows widen.
    Same statement as dbt-spark's otherwise.
#}
{% macro get_insert_into_sql(source_relation, target_relation) %}

    {#- a column whose type the new rows widen (decimal(8,2) -> decimal(12,2), int -> bigint)
        is widened in the target first, never cast down (python_ingest/tables/evolve.py;
        on_schema_change append_new_columns adds new columns only) -#}
    {%- set source_columns = [] -%}
    {%- for column in adapter.get_columns_in_relation(source_relation) -%}
        {%- do source_columns.append([column.name, column.dtype]) -%}
    {%- endfor -%}
    {%- do adapter.sluice_widen(target_relation | string, source_columns) -%}

    {%- set dest_columns = [] -%}
    {%- for column in adapter.get_columns_in_relation(target_relation) -%}
        {%- if not column.name.startswith('_hoodie_') -%}
            {%- do dest_columns.append(column) -%}
        {%- endif -%}
    {%- endfor -%}
    {%- set dest_cols_csv = dest_columns | map(attribute='quoted') | join(', ') -%}
    insert into table {{ target_relation }} ({{ dest_cols_csv }})
    select {{ dest_cols_csv }} from {{ source_relation }}

{% endmacro %}
