{#
    sluice's changelog columns a converter passes through unchanged (everything but
    _changed_columns, which sluice_changed_columns translates). The fork and the merge need them.
#}
{% macro sluice_meta_columns(relation_alias=none) -%}
    {%- set prefix = relation_alias ~ '.' if relation_alias else '' -%}
    {%- for column in ['_row_key', '_ref_key', '_source', '_event_ts', '_is_deleted',
                       '_force_update', '_data_center', '_kafka_partition', '_kafka_offset',
                       '_batch_id', '_ingested_at'] %}
    {{ prefix }}{{ column }}{% if not loop.last %},{% endif %}
    {%- endfor -%}
{%- endmacro %}
