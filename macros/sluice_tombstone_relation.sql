{#
    The tombstone table of the lake model being merged (row key and ref key of each delete),
    named by the runner (var sluice_tombstone_table), or none when there is none yet.
    Deletes are remembered there so that a late, older change never resurrects a deleted row.
#}
{% macro sluice_tombstone_relation() -%}
    {%- set name = var('sluice_tombstone_table', none) -%}
    {%- if name is none or not execute -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set parts = name.split('.') -%}
    {%- set existing = adapter.get_relation(database=none, schema=parts[0],
                                            identifier=parts[1]) -%}
    {{ return(existing) }}
{%- endmacro %}
