{#
    Materialization of lake models: applies one raw batch's change set (the model's SQL, built
    with sluice_merge_changes) to the lake table with one MERGE (Hudi merge-on-read with its
    record-level index, or Iceberg merge-on-read: sluice_table_format), after writing the
    rejected changes to the error table and the deletes to the tombstone table.

    dbt-spark's own incremental merge cannot delete and fails on duplicate source keys, hence
    this one. It runs only under the runner (`sluice run`), which sets the vars below and
    commits the merge checkpoint (sluice.merge.batch_id) in the same commits; a plain
    `dbt run` skips lake models with a message.

    vars (set by the runner; every table name comes from python_ingest/tables/names.py):
    sluice_batch_id (the batch), sluice_error_table, sluice_tombstone_table,
    sluice_changes_table (scratch: the change set, computed once, replaced by every merge;
    the runner reads its counts from there), sluice_skip (targets already committed for this
    batch by an earlier, interrupted run).
    config: keep_tombstones (a delete marks the row _is_deleted instead of removing it).
#}
{% materialization lake_merge, adapter='spark' %}
    {%- set batch_id = var('sluice_batch_id', none) -%}
    {%- if batch_id is none -%}
        {{ log("skipping " ~ this ~ ": lake models are merged by `sluice run <job>`, which "
               ~ "commits the merge checkpoint with the data", info=true) }}
        {% call statement('main') -%} select 1 {%- endcall %}
        {{ return({'relations': []}) }}
    {%- endif -%}

    {%- set target = this.incorporate(type='table') -%}
    {%- set table_format = sluice_table_format() -%}
    {%- set keep_tombstones = config.get('keep_tombstones', false) -%}
    {%- set error_table = var('sluice_error_table') -%}
    {%- set tombstone_table = var('sluice_tombstone_table') -%}
    {%- set skip = var('sluice_skip', []) -%}
    {%- set changes_view = var('sluice_changes_table') -%}
    {%- set existing = adapter.get_relation(database=this.database, schema=this.schema,
                                            identifier=this.identifier) -%}

    {{ run_hooks(pre_hooks) }}

    {#- Spark's constraint propagation explodes on the change set's many aliased columns
        (minutes and out of memory); the merge does not need it -#}
    {%- set constraint_conf = 'spark.sql.constraintPropagation.enabled' -%}
    {%- set previous_constraints = run_query('set ' ~ constraint_conf).rows[0][1] -%}
    {% call statement('constraints_off') -%} set {{ constraint_conf }}=false {%- endcall %}

    {#- computed once and stored: the statements below change the tables it reads. On Hudi a
        plain parquet table (a process that died may have left its files: CTAS replaces them) -#}
    {% call statement('drop_changes') -%}
        drop table if exists {{ changes_view }} purge
    {%- endcall %}
    {%- if table_format == 'hudi' %}
        {% call statement('changes_location') -%}
            set spark.sql.legacy.allowNonEmptyLocationInCTAS=true
        {%- endcall %}
    {%- endif %}
    {% call statement('changes') -%}
        create table {{ changes_view }}
        using {{ 'parquet' if table_format == 'hudi' else 'iceberg' }}
        as {{ sql }}
    {%- endcall %}

    {#- lake columns: the change set's, without the merge's own bookkeeping -#}
    {%- set described = run_query('describe ' ~ changes_view) -%}
    {%- set lake_columns = [] -%}
    {%- for row in described.rows -%}
        {%- if row[0] and not row[0].startswith('#')
              and row[0] not in ('_merge_action', '_rejected') -%}
            {%- do lake_columns.append((row[0], row[1])) -%}
        {%- endif -%}
    {%- endfor -%}
    {%- do lake_columns.append(('_merged_at', 'timestamp')) -%}

    {%- if existing is none -%}
        {% call statement('create_target') -%}
            create table {{ target }} (
                {%- for name, type in lake_columns %}
                `{{ name }}` {{ type }}{% if not loop.last %},{% endif %}
                {%- endfor %}
            )
            using {{ table_format }}
            tblproperties (
                {%- for key, value in sluice_lake_properties().items() %}
                '{{ key }}' = '{{ value }}'{% if not loop.last %},{% endif %}
                {%- endfor %}
            )
        {%- endcall %}
        {%- if table_format == 'hudi' %}
            {#- a first, empty commit: Hudi 1.0 would take the files of a failed first merge
                for committed once a later one completes (docs/formats.md) -#}
            {% call statement('first_commit') -%}
                insert into {{ target }}
                select
                    {%- for name, type in lake_columns %}
                    cast(null as {{ type }}) as `{{ name }}`{% if not loop.last %},{% endif %}
                    {%- endfor %}
                where false
            {%- endcall %}
        {%- endif %}
    {%- else -%}
        {#- on_schema_change append_new_columns: the lake table gains new columns, never loses -#}
        {%- set present = adapter.get_columns_in_relation(target) | map(attribute='column')
                          | map('lower') | list -%}
        {%- for name, type in lake_columns -%}
            {%- if name | lower not in present -%}
                {% call statement('add_column_' ~ name) -%}
                    alter table {{ target }} add column `{{ name }}` {{ type }}
                {%- endcall %}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}

    {#- the error and tombstone inserts run only when they have rows (an empty Hudi commit
        costs about a second); both come before the merge, so a lake checkpoint at or past
        this batch means they are committed or were empty (steps/pipeline.py) -#}
    {%- set pending = run_query(
        'select coalesce(sum(size(_rejected)), 0), '
        ~ "count_if(_merge_action in ('delete', 'tombstone')) from " ~ changes_view).rows[0] -%}
    {%- if 'errors' not in skip and pending[0] > 0 %}
        {% call statement('rejected') -%}
            insert into {{ error_table }}
                (_row_key, _ref_key, _batch_id, _kafka_partition, _kafka_offset, error_step,
                 error_exception, error_source_data, _errored_at)
            select
                _row_key,
                rejected._ref_key,
                _batch_id,
                rejected._kafka_partition,
                rejected._kafka_offset,
                'merge',
                'partial update of a row that does not exist in {{ target }}: it changes only '
                    || 'some columns and there is no current row to take the others from',
                rejected.error_source_data,
                current_timestamp()
            from {{ changes_view }}
            lateral view explode(_rejected) exploded as rejected
        {%- endcall %}
    {%- endif %}

    {%- if 'tombstones' not in skip and pending[1] > 0 %}
        {#- append-only: the newest entry of a row key is its last delete -#}
        {% call statement('tombstones') -%}
            insert into {{ tombstone_table }} (_row_key, _ref_key, _batch_id)
            select _row_key, _ref_key, _batch_id
            from {{ changes_view }}
            where _merge_action in ('delete', 'tombstone')
        {%- endcall %}
    {%- endif %}

    {%- set framework = ['_ref_key', '_event_ts', '_source', '_data_center', '_batch_id'] -%}
    {% call statement('main') -%}
        {%- if 'lake' in skip %}
        select 1
        {%- else %}
        merge into {{ target }} as lake
        using (
            select *, current_timestamp() as _merged_at
            from {{ changes_view }}
            where _merge_action != 'none'
        ) as batch
        on lake._row_key = batch._row_key
        {#- mutually exclusive clauses that assign every column: Hudi's MERGE needs both (it
            evaluates an unconditional update before an earlier conditional delete, and a
            column left out of an update comes back null) -#}
        {%- if keep_tombstones %}
        when matched and batch._merge_action in ('delete', 'tombstone') then update set
            {%- for name, type in lake_columns %}
            {%- if name in framework or name in ('_row_key', '_merged_at') %}
            lake.`{{ name }}` = batch.`{{ name }}`,
            {%- elif name != '_is_deleted' %}
            lake.`{{ name }}` = lake.`{{ name }}`,
            {%- endif %}
            {%- endfor %}
            lake._is_deleted = true
        {%- else %}
        when matched and batch._merge_action in ('delete', 'tombstone') then delete
        {%- endif %}
        when matched and batch._merge_action not in ('delete', 'tombstone') then update set
            {%- for name, type in lake_columns %}
            lake.`{{ name }}` = batch.`{{ name }}`{% if not loop.last %},{% endif %}
            {%- endfor %}
        when not matched
            {%- if not keep_tombstones %} and batch._merge_action in ('insert', 'update'){% endif %}
            then insert (
                {%- for name, type in lake_columns %}
                `{{ name }}`{% if not loop.last %},{% endif %}
                {%- endfor %}
            ) values (
                {%- for name, type in lake_columns %}
                batch.`{{ name }}`{% if not loop.last %},{% endif %}
                {%- endfor %}
            )
        {%- endif %}
    {%- endcall %}

    {% call statement('constraints_back') -%}
        set {{ constraint_conf }}={{ previous_constraints }}
    {%- endcall %}
    {{ run_hooks(post_hooks) }}
    {{ return({'relations': [target]}) }}
{% endmaterialization %}
