{#
    A lake model that merges every payload column of a staging model's valid rows (the fork's
    output, staging.<model>__valid), with the columns read at run time: a column added to the
    source table reaches the lake table with no edit of the model (the lake_merge
    materialization adds it to the lake table). Call it as the whole body of a lake model:
    `{{ sluice_merge_all_columns(ref('stg_<source>__<job>')) }}`; the ref also makes the model
    depend on the converter, which is how `sluice run` finds it.
#}
{% macro sluice_merge_all_columns(staging) -%}
    {%- set valid = api.Relation.create(database=staging.database, schema=staging.schema,
                                        identifier=staging.identifier ~ '__valid',
                                        type='table') -%}
    {{ sluice_merge_changes(
        changes=valid,
        columns=sluice_payload_columns(valid),
        batch_id=var('sluice_batch_id'),
        current=(this if sluice_has_target() else none),
        tombstones=sluice_tombstone_relation(),
    ) }}
{%- endmacro %}
