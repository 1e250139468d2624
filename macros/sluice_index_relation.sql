{#
    The global index of the lake model being merged (meta.<job>__index: each row key's ref
    key and whether it is deleted, per batch; docs/index.md), or none outside a merge (the
    change set then reads the lake table and the tombstone table instead). Both the runner
    and a plain `dbt run`'s plan create it before the merge renders.
#}
{% macro sluice_index_relation() -%}
    {{ return(sluice_var_relation('sluice_index_table')) }}
{%- endmacro %}


{#- The table a merge var names (sluice_tombstone_table, sluice_index_table) as a relation,
    without a look-up (dbt's relation cache does not know a table created since dbt
    started), or none outside a merge. -#}
{% macro sluice_var_relation(name) -%}
    {%- set value = sluice_var(name) -%}
    {%- if value is none or not execute -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set parts = value.split('.') -%}
    {{ return(api.Relation.create(schema=parts[0], identifier=parts[1], type='table')) }}
{%- endmacro %}
