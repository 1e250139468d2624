{#
    Table properties of a lake table (one row per row key, changed by one merge per batch).
    Hudi: merge-on-read keyed by _row_key, ordered by _ref_key; the change set already applied
    the out-of-order guard and force updates, so the latest commit wins (COMMIT_TIME_ORDERING);
    a key's file group is its hash bucket (`index`: sluice_lake_index, the default), or the
    record-level index finds it without scanning the table (no column stats index: Hudi
    1.0.2's collection fails on null values in log files); no inline
    compaction: sluice compacts the lake after every `services.compact_every`-th merge
    (steps/services.py), after the merge's commit, so that a merge's latency never includes
    rewriting the table (inline, the 10M-row bench's merge took 62 s, 48 s of it compacting);
    cleaning keeps 10 commits (Hudi's default; `services.keep_commits`) and runs with the
    compaction, not after every commit (each clean cost a merge ~0.5 s and a metadata-table
    commit that every file listing then read).
    Iceberg: format 2 with merge-on-read deletes, updates and merges.
#}
{% macro sluice_lake_properties(index={}) -%}
    {%- if sluice_table_format() == 'hudi' and index -%}
        {#- a bucket-index lake: the bucket settings instead of the record index's -#}
        {%- set properties = {
            'type': 'mor',
            'primaryKey': '_row_key',
            'preCombineField': '_ref_key',
            'hoodie.record.merge.mode': 'COMMIT_TIME_ORDERING',
            'hoodie.compact.inline': 'false',
            'hoodie.clean.automatic': 'false',
            'hoodie.clean.commits.retained': '10',
        } -%}
        {%- do properties.update(index) -%}
        {{ return(properties) }}
    {%- elif sluice_table_format() == 'hudi' -%}
        {{ return({
            'type': 'mor',
            'primaryKey': '_row_key',
            'preCombineField': '_ref_key',
            'hoodie.record.merge.mode': 'COMMIT_TIME_ORDERING',
            'hoodie.metadata.record.index.enable': 'true',
            'hoodie.index.type': 'RECORD_INDEX',
            'hoodie.metadata.index.column.stats.enable': 'false',
            'hoodie.metadata.index.partition.stats.enable': 'false',
            'hoodie.compact.inline': 'false',
            'hoodie.clean.automatic': 'false',
            'hoodie.clean.commits.retained': '10',
        }) }}
    {%- else -%}
        {{ return({
            'format-version': '2',
            'write.delete.mode': 'merge-on-read',
            'write.update.mode': 'merge-on-read',
            'write.merge.mode': 'merge-on-read',
        }) }}
    {%- endif -%}
{%- endmacro %}
