{#
    The tombstone table of the lake model being merged (row key and ref key of each delete),
    named by the runner (var sluice_tombstone_table) or by a plain `dbt run`'s plan
    (sluice_var), or none outside a merge. Marts and dispersal learn deletes there; the merge
    reads them from the global index when it has one (sluice_index_relation). Both create it
    before the merge renders.
#}
{% macro sluice_tombstone_relation() -%}
    {{ return(sluice_var_relation('sluice_tombstone_table')) }}
{%- endmacro %}
