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
{#- the keys themselves: python_ingest/runtime/catalog.py lake_properties (the batch path
    creates a new lake with the same, steps/batch.py) -#}
{% macro sluice_lake_properties(index={}) -%}
    {{ return(adapter.sluice_lake_properties(sluice_table_format(), index)) }}
{%- endmacro %}
