{#
    A converter that converts nothing: every column of the raw source (the payload columns
    and sluice's own; not Hudi's _hoodie_* meta columns), only the raw batches the staging table does not hold yet. For tapped
    tables (`sluice tap <source> --scaffold`), whose columns already carry the source's names
    and types. `select *` is resolved when the model runs, so a column the source table gains
    reaches staging with the next run (on_schema_change: append_new_columns adds it).
    _changed_columns passes through as is: staging names are the source names.
#}
{% macro sluice_passthrough(source_relation) -%}
with

source as (

    select
        {#- Hudi tables also hold Hudi's _hoodie_* columns: list the others (Iceberg: all) -#}
        {%- if execute and sluice_table_format() == 'hudi' %}
        {%- set columns = [] -%}
        {%- for column in adapter.get_columns_in_relation(source_relation) -%}
            {%- if not column.name.startswith('_hoodie_') -%}
                {%- do columns.append('`' ~ column.name ~ '`') -%}
            {%- endif -%}
        {%- endfor %}
        {%- if not columns %}
            {{ exceptions.raise_compiler_error("sluice_passthrough: " ~ source_relation
               ~ " has no columns: does the raw table exist? (run `sluice ingest` first)") }}
        {%- endif %}
        {{ columns | join(',\n        ') }}
        {%- else %} *
        {%- endif %}
    from {{ source_relation }}
    {{ sluice_new_batches() }}

),

passed_through as (

    select * from source

)

select * from passed_through
{%- endmacro %}
