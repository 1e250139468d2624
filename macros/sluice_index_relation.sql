{#
    The global index of the lake model being merged (meta.<job>__index: each row key's ref
    key and whether it is deleted, per batch; docs/index.md), named by the runner (var
    sluice_index_table) or by a plain `dbt run`'s plan (sluice_var), or none outside a merge
    (the change set then reads the lake table and the tombstone table instead). Both create
    it before the merge renders.
#}
{% macro sluice_index_relation() -%}
    {%- set name = sluice_var('sluice_index_table') -%}
    {%- if name is none or not execute -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set parts = name.split('.') -%}
    {{ return(api.Relation.create(schema=parts[0], identifier=parts[1], type='table')) }}
{%- endmacro %}
