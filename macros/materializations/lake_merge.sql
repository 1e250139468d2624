{#
    Materialization of lake models: applies one raw batch's change set (the model's SQL, built
    with sluice_merge_changes) to the lake table with one MERGE (Hudi merge-on-read with its
    record-level index, or Iceberg merge-on-read: sluice_table_format), after writing the
    rejected changes to the error table and every changed key (deletes too) to the job's
    global index (docs/index.md).

    dbt-spark's own incremental merge cannot delete and fails on duplicate source keys, hence
    this one. Two ways it runs:
    * under the runner (`sluice run`): one batch, named by the vars below; the runner commits
      the merge checkpoint (sluice.merge.batch_id) in the same commits;
    * in a plain `dbt run`: sluice's plan (python_ingest/steps/transform.py, through the
      dbt_sluice plugin's adapter.sluice_* functions) forks what the converter staged, then
      every pending batch is merged in turn: the model's SQL rendered again for the batch,
      its inserts and MERGE committed with the same checkpoint by sluice. When another run
      holds the job's lease, the model is left as it is, with a message.

    vars (set by the runner; every table name comes from python_ingest/tables/names.py):
    sluice_batch_id (the batch), sluice_error_table, sluice_index_table,
    sluice_tombstone_table (deletes before the index: read only to build it),
    sluice_changes_table (scratch: the change set, computed once, replaced by every merge;
    the runner reads its counts from there), sluice_skip (targets already committed for this
    batch by an earlier, interrupted run).
    config: keep_tombstones (a delete marks the row _is_deleted instead of removing it).
#}
{% materialization lake_merge, adapter='spark' %}
    {%- set target = this.incorporate(type='table') -%}
    {{ run_hooks(pre_hooks) }}
    {%- if var('sluice_batch_id', none) is not none -%}
        {#- the runner: one batch, its checkpoint committed around this dbt run -#}
        {%- do sluice_apply_change_set(sql, target, var('sluice_skip', []), none) -%}
    {%- else -%}
        {%- do sluice_merge_pending(target) -%}
        {% call statement('main') -%} select 1 {%- endcall %}
    {%- endif -%}
    {{ run_hooks(post_hooks) }}
    {{ return({'relations': [target]}) }}
{% endmaterialization %}
