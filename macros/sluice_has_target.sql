{#
    Whether the model's own table exists yet (the current rows a merge starts from).
    False at parse time and on the first run; unit tests override it to mock `this`. In a plain
    `dbt run`, sluice answers for the batch being merged (the first batch of a run may have
    created the table after dbt filled its relation cache).
#}
{% macro sluice_has_target() -%}
    {%- if not execute -%}
        {{ return(false) }}
    {%- endif -%}
    {%- set known = sluice_var('sluice_has_target') -%}
    {%- if known is not none -%}
        {{ return(known) }}
    {%- endif -%}
    {%- set existing = adapter.get_relation(database=this.database, schema=this.schema,
                                            identifier=this.identifier) -%}
    {{ return(existing is not none) }}
{%- endmacro %}
