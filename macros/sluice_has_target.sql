{#
    Whether the model's own table exists yet (the current rows a merge starts from).
    False at parse time and on the first run; unit tests override it to mock `this`.
#}
{% macro sluice_has_target() -%}
    {%- if not execute -%}
        {{ return(false) }}
    {%- endif -%}
    {%- set existing = adapter.get_relation(database=this.database, schema=this.schema,
                                            identifier=this.identifier) -%}
    {{ return(existing is not none) }}
{%- endmacro %}
