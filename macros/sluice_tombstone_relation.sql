{#
    The tombstone table of the lake model being merged (row key and ref key of each delete),
    named by the runner (var sluice_tombstone_table) or by a plain `dbt run`'s plan
    (sluice_var), or none outside a merge. Deletes are remembered there so that a late, older
    change never resurrects a deleted row. Both create it before the merge renders, so it is
    named without a look-up (dbt's relation cache does not know a table created since dbt
    started).
#}
{% macro sluice_tombstone_relation() -%}
    {%- set name = sluice_var('sluice_tombstone_table') -%}
    {%- if name is none or not execute -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set parts = name.split('.') -%}
    {{ return(api.Relation.create(schema=parts[0], identifier=parts[1], type='table')) }}
{%- endmacro %}
