{#- Apply one batch's change set (`sql`) to `target`. Under the runner (job none) each
    statement runs here, the MERGE as dbt's 'main'; in a plain `dbt run` the inserts and the
    MERGE are handed to sluice, which commits them with the merge checkpoint. -#}
{% macro sluice_apply_change_set(sql, target, skip, job) -%}
    {%- set committed = [] -%}
    {%- set table_format = sluice_table_format() -%}
    {%- set keep_tombstones = config.get('keep_tombstones', false) -%}
    {%- set error_table = sluice_var('sluice_error_table') -%}
    {%- set index_table = sluice_var('sluice_index_table') -%}
    {%- set changes_view = sluice_var('sluice_changes_table') -%}
    {%- set existing = target if sluice_has_target() else none -%}

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
    {#- a Hudi lake with the bucket index is written by upsert: its deletes are rows flagged in
        Hudi's delete column (always false in the table) -#}
    {%- set bucket = sluice_lake_index(existing) -%}
    {%- set table_columns = lake_columns + ([('_hoodie_is_deleted', 'boolean')] if bucket else []) -%}

    {%- if existing is none -%}
        {% call statement('create_target') -%}
            create table {{ target }} (
                {%- for name, type in table_columns %}
                `{{ name }}` {{ type }}{% if not loop.last %},{% endif %}
                {%- endfor %}
            )
            using {{ table_format }}
            tblproperties (
                {%- for key, value in sluice_lake_properties(bucket).items() %}
                '{{ key }}' = '{{ value }}'{% if not loop.last %},{% endif %}
                {%- endfor %}
            )
        {%- endcall %}
        {%- if bucket %}
            {#- the bucket settings kept with the table, before its first commit: Hudi keeps
                none of them, and every later process must write it the same way -#}
            {%- do adapter.sluice_keep_settings(target | string, bucket) %}
        {%- endif %}
        {%- if table_format == 'hudi' %}
            {#- a first, empty commit: Hudi 1.0 would take the files of a failed first merge
                for committed once a later one completes (docs/formats.md). It carries no
                merge checkpoint (the runner sets it around this whole run, key as
                tables/checkpoints.py names it): a process killed before the merge's own
                commit must leave the batch unmerged, or the rerun takes it for merged and the
                lake misses its rows -#}
            {%- set checkpoint_key = 'sluice.merge.batch_id' -%}
            {%- set checkpoint = run_query('set ' ~ checkpoint_key).rows[0][1] -%}
            {%- set marked = checkpoint != '<undefined>' -%}
            {%- if marked %}
                {% call statement('first_commit_unmarked') -%}
                    reset {{ checkpoint_key }}
                {%- endcall %}
            {%- endif %}
            {% call statement('first_commit') -%}
                insert into {{ target }}
                select
                    {%- for name, type in table_columns %}
                    cast(null as {{ type }}) as `{{ name }}`{% if not loop.last %},{% endif %}
                    {%- endfor %}
                where false
            {%- endcall %}
            {%- if marked %}
                {% call statement('first_commit_marked') -%}
                    set {{ checkpoint_key }}={{ checkpoint }}
                {%- endcall %}
            {%- endif %}
        {%- endif %}
    {%- else -%}
        {#- a column whose type the change set widens is widened in the lake first
            (python_ingest/tables/evolve.py; a narrowing stops the run, named) -#}
        {%- do adapter.sluice_widen(target | string, lake_columns) -%}
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

    {#- the error and index inserts run only when they have rows (an empty Hudi commit costs
        about a second); both come before the merge, so a lake checkpoint at or past this
        batch means they are committed or were empty (steps/pipeline.py) -#}
    {%- set pending = run_query(
        'select coalesce(sum(size(_rejected)), 0), '
        ~ "count_if(_merge_action != 'none') from " ~ changes_view).rows[0] -%}
    {%- if 'errors' not in skip and pending[0] > 0 %}
        {% set rejected_sql -%}
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
        {%- endset %}
        {%- do sluice_statement('rejected', rejected_sql, job, committed) %}
    {%- endif %}

    {%- if 'index' not in skip and pending[1] > 0 %}
        {#- the global index: every key this batch changed, with its state after it (deletes
            too: marts and dispersal learn of deletes there, docs/index.md) -#}
        {% set index_sql -%}
            insert into {{ index_table }} (_row_key, _ref_key, _is_deleted, _batch_id, _indexed_at)
            select _row_key, _ref_key, _is_deleted, _batch_id, current_timestamp()
            from {{ changes_view }}
            where _merge_action != 'none'
        {%- endset %}
        {%- do sluice_statement('index', index_sql, job, committed) %}
    {%- endif %}
    {%- if job is none and adapter.sluice_fault is defined %}
        {%- do adapter.sluice_fault('merge_after_index') %}
    {%- endif %}

    {#- what a delete sets in a row the lake keeps (keep_tombstones: _is_deleted true, the
        delete's ref key and source); the row's other columns keep their values -#}
    {%- set kept_as_is = ['_row_key', '_ref_key', '_is_deleted', '_event_ts', '_source',
                          '_data_center', '_batch_id', '_merged_at'] -%}
    {% set merge_sql -%}
        {%- if 'lake' in skip %}
        select 1
        {%- elif bucket %}
        {#- the bucket lake: an upsert (the session's insert operation, set around it below);
            each key's file group is its hash bucket, so nothing is looked up -#}
        insert into {{ target }} (
            {%- for name, type in table_columns %}
            `{{ name }}`{% if not loop.last %},{% endif %}
            {%- endfor %}
        )
        select
            {{ sluice_lake_row(lake_columns) }},
            _merge_action = 'delete' as `_hoodie_is_deleted`
        from (
            select *, current_timestamp() as _merged_at
            from {{ changes_view }}
            {# not a tombstone (a delete of a key the lake does not hold): Hudi 1.0.2 writes
               a flagged delete into a bucket's new file group as a row #}
            where _merge_action in ('insert', 'update', 'delete')
        ) as batch
        {%- else %}
        merge into {{ target }} as lake
        using (
            {%- if table_format == 'hudi' and not keep_tombstones %}
            {#- a delete outranks the row it removes (sluice_lake_row.sql) -#}
            select {{ sluice_lake_row(lake_columns) }}, _merge_action
            from (
                select *, current_timestamp() as _merged_at
                from {{ changes_view }}
                where _merge_action != 'none'
            ) as changed
            {%- elif keep_tombstones %}
            {#- a row deleted keeps its values: read from the lake here, because Hudi refuses
                a target column on the right of an update of a merge-on-read table -#}
            select
                changed.*
                {%- for name, type in lake_columns if name not in kept_as_is %},
                kept.`{{ name }}` as `_kept__{{ name }}`
                {%- endfor %}
            from (
                select *, current_timestamp() as _merged_at
                from {{ changes_view }}
                where _merge_action != 'none'
            ) as changed
            left join (
                select * from {{ target }}
                where _row_key in (
                    select _row_key from {{ changes_view }}
                    where _merge_action in ('delete', 'tombstone')
                )
            ) as kept on kept._row_key = changed._row_key
            {%- else %}
            select *, current_timestamp() as _merged_at
            from {{ changes_view }}
            where _merge_action != 'none'
            {%- endif %}
        ) as batch
        on lake._row_key = batch._row_key
        {#- mutually exclusive clauses that assign every column: Hudi's MERGE needs both (it
            evaluates an unconditional update before an earlier conditional delete, and a
            column left out of an update comes back null) -#}
        {%- if keep_tombstones %}
        when matched and batch._merge_action in ('delete', 'tombstone') then update set
            {%- for name, type in lake_columns %}
            lake.`{{ name }}` = batch.`{{ name if name in kept_as_is else '_kept__' ~ name }}`
                {%- if not loop.last %},{% endif %}
            {%- endfor %}
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
    {%- endset %}
    {#- Hudi's SQL insert is a bulk insert in sluice's sessions (the append-only tables); the
        bucket lake's is an upsert. Statements handed to sluice (a plain `dbt run`) get the
        setting back from its commit, also after a failure (runtime/catalog.py
        insert_operation_kept); run here (the runner), this macro sets it back after its
        insert, and the runner's merge step once more after a failure -#}
    {%- set operation_conf = 'hoodie.spark.sql.insert.into.operation' -%}
    {%- set upsert = 'set ' ~ operation_conf ~ '=upsert' if bucket and 'lake' not in skip
                     else none -%}
    {%- if job is none %}
        {%- if upsert %}
            {%- set previous_operation = run_query('set ' ~ operation_conf).rows[0][1] -%}
            {% call statement('upsert_on') -%} {{ upsert }} {%- endcall %}
        {%- endif %}
        {% call statement('main') -%} {{ merge_sql }} {%- endcall %}
        {%- if upsert %}
            {% call statement('upsert_off') -%}
                set {{ operation_conf }}={{ previous_operation
                    if previous_operation and previous_operation != '<undefined>'
                    else 'bulk_insert' }}
            {%- endcall %}
        {%- endif %}
    {%- elif 'lake' not in skip %}
        {%- if upsert %}{% do committed.append(upsert) %}{% endif %}
        {%- do committed.append(merge_sql) %}
    {%- endif %}
    {%- set counts = adapter.sluice_commit_merge(committed) if job is not none else none %}

    {% call statement('constraints_back') -%}
        set {{ constraint_conf }}={{ previous_constraints }}
    {%- endcall %}
    {{ return(counts) }}
{%- endmacro %}
