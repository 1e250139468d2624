{#
    The row's own columns of a relation (every column but sluice's changelog and bookkeeping
    columns), read from the catalog when the model runs: a lake model built on them merges the
    columns the staging table has now, including columns added since the model was written.
    Empty at parse time (nothing to read yet) and when the relation does not exist. Compiled
    for the runner's batch path (var sluice_compile) the columns are the converter's, from var
    sluice_changes_columns: the valid rows are a view there, and the valid table, written only
    on the step tables' path, may lack columns added since.
#}
{% macro sluice_payload_columns(relation) -%}
    {%- if not execute -%}
        {{ return([]) }}
    {%- endif -%}
    {%- set sluice_columns = ['_row_key', '_ref_key', '_changed_columns', '_source', '_event_ts',
                              '_is_deleted', '_force_update', '_data_center', '_kafka_partition',
                              '_kafka_offset', '_kafka_timestamp', '_batch_id', '_ingested_at',
                              '_merged_at', '_replay_of'] -%}
    {%- set columns = [] -%}
    {%- set names = var('sluice_changes_columns', {}).keys() | list
                    if var('sluice_compile', false)
                    else adapter.get_columns_in_relation(relation) | map(attribute='name')
                    | list -%}
    {%- for name in names -%}
        {%- if name | lower not in sluice_columns and not name.startswith('_hoodie_') -%}
            {%- do columns.append(name) -%}
        {%- endif -%}
    {%- endfor -%}
    {{ return(columns) }}
{%- endmacro %}
