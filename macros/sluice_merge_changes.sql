{#
    The change set of one raw batch for a lake table: one row per row key, saying what the
    batch does to that row (_merge_action: insert, update, delete, tombstone or none), the
    row's values afterwards, and the changes rejected because they update a row that does not
    exist (_rejected, for the error table). The lake_merge materialization applies it.

    The result equals applying the batch's changes one by one, in ref-key order, to the
    current row (or its tombstone), where a change applies when its ref key is newer than the
    row's current one or it is a force update:
      * duplicates (same row key and ref key) count once;
      * sorted by ref key, the first change that applies is followed only by changes that
        apply too (each is newer than its predecessor), so the applied changes are a suffix
        (a rejected partial update changes nothing, so it does not start the suffix);
      * the last full row or delete in that suffix resets the row; partial updates after it
        set only their _changed_columns; a partial update while the row does not exist is
        rejected (it never creates a half-empty row).
    See docs/pipeline.md for the whole semantics.
#}
{% macro sluice_merge_changes(changes, columns, batch_id, current=none, tombstones=none) -%}
{#- a plain `dbt run` renders the model once per pending batch (sluice_var) -#}
{%- set batch_id = batch_id if batch_id is not none else sluice_var('sluice_batch_id', 0) -%}
{#- compiled for the runner's batch path: the valid rows are a view the runner names -#}
{%- set changes = '__SLUICE_VALID__' if var('sluice_compile', false) else changes -%}
with

changes as (

    select * from {{ changes }}
    where _batch_id = {{ batch_id }}

),

deduplicated as (

    -- at-least-once delivery: a change (row key, ref key) may arrive more than once
    -- (a forced re-delivery wins over a plain copy)
    select *
    from (
        select
            *,
            to_json(struct(*)) as _source_data,
            row_number() over (
                partition by _row_key, _ref_key
                order by _force_update desc, _kafka_partition, _kafka_offset
            ) as _copy
        from changes
    )
    where _copy = 1

),

batch_keys as (

    select distinct _row_key from deduplicated

),

{%- set index = sluice_index_relation() %}
{%- set partial_keys = sluice_partial_keys(changes, batch_id) if index is not none else none %}

current_rows as (

    {% if current is not none and (index is none or partial_keys != []) -%}
    {%- set missing = sluice_missing_columns(current, changes, columns) %}
    -- {{ 'the lake rows of the keys this batch updates partially: the columns the update leaves are taken from them'
          if index is not none else 'the lake rows of the batch keys' }}
    select
        _row_key,
        _ref_key as _current_ref_key,
        not coalesce(_is_deleted, false) as _current_is_live,
        {%- for column in columns %}
        {%- if column | lower in missing %}
        cast(null as {{ missing[column | lower] }}) as _current__{{ column }},
        {%- else %}
        {{ column }} as _current__{{ column }},
        {%- endif %}
        {%- endfor %}
        true as _is_in_target
    from {{ current }}
    {%- if partial_keys is not none %}
    where _row_key in (
        {%- if partial_keys is string %}
        {{ partial_keys }}
        {%- else %}
        {%- for key in partial_keys %}
        '{{ key | replace('\\', '\\\\') | replace("'", "\\'") }}'{% if not loop.last %},{% endif %}
        {%- endfor %}
        {%- endif %}
    )
    {%- endif %}
    {%- else -%}
    select
        _row_key,
        _ref_key as _current_ref_key,
        false as _current_is_live,
        {%- for column in columns %}
        {{ column }} as _current__{{ column }},
        {%- endfor %}
        true as _is_in_target
    from changes
    where false
    {%- endif %}

),

{% if index is not none -%}
indexed as (

    -- the global index (meta.<job>__index): each batch key's newest entry of an earlier
    -- batch; a narrow scan instead of the lake's rows and its tombstones
    select
        _row_key,
        max_by(_ref_key, _batch_id) as _current_ref_key,
        not max_by(_is_deleted, _batch_id) as _current_is_live
    from {{ index }}
    where _batch_id < {{ batch_id }}
        and _row_key in (select _row_key from batch_keys)
    group by _row_key

),

current_state as (

    -- the row as it is now: its newest index entry, else nothing
    select
        batch_keys._row_key,
        indexed._current_ref_key,
        coalesce(indexed._current_is_live, false) as _current_is_live,
        indexed._row_key is not null as _is_in_target,
        {%- for column in columns %}
        current_rows._current__{{ column }}{% if not loop.last %},{% endif %}
        {%- endfor %}
    from batch_keys
    left join indexed on batch_keys._row_key = indexed._row_key
    left join current_rows on batch_keys._row_key = current_rows._row_key

),
{%- else %}
tombstones as (

    {% if tombstones is not none -%}
    -- the newest delete of each row key
    select _row_key, max_by(_ref_key, _batch_id) as _tombstone_ref_key
    from {{ tombstones }}
    group by _row_key
    {%- else -%}
    select _row_key, _ref_key as _tombstone_ref_key from changes where false
    {%- endif %}

),

current_state as (

    -- the row as it is now: its lake row, else its tombstone, else nothing
    select
        batch_keys._row_key,
        coalesce(current_rows._current_ref_key, tombstones._tombstone_ref_key)
            as _current_ref_key,
        coalesce(current_rows._current_is_live, false) as _current_is_live,
        coalesce(current_rows._is_in_target, false) as _is_in_target,
        {%- for column in columns %}
        current_rows._current__{{ column }}{% if not loop.last %},{% endif %}
        {%- endfor %}
    from batch_keys
    left join current_rows on batch_keys._row_key = current_rows._row_key
    left join tombstones on batch_keys._row_key = tombstones._row_key

),
{%- endif %}

sequenced as (

    select
        deduplicated.*,
        current_state._current_ref_key,
        current_state._current_is_live,
        current_state._is_in_target,
        {%- for column in columns %}
        current_state._current__{{ column }},
        {%- endfor %}
        deduplicated._changed_columns is not null
            and not deduplicated._is_deleted as _is_partial,
        current_state._current_ref_key is null
            or deduplicated._ref_key > current_state._current_ref_key
            or deduplicated._force_update as _is_candidate
    from deduplicated
    inner join current_state on deduplicated._row_key = current_state._row_key

),

applicable as (

    -- the first change that applies: newer than the current version (or forced), and not a
    -- partial update of a row that does not exist; every newer change after it applies too
    select
        *,
        coalesce(_ref_key >= min(
            case when _is_candidate and (not _is_partial or _current_is_live) then _ref_key end
        ) over (partition by _row_key), false) as _is_in_suffix
    from sequenced

),

classified as (

    -- a partial update is rejected when the row does not exist as it reaches it: the last
    -- full row or delete applied before it decides; before any, whether the row exists now
    select
        *,
        _is_partial and (
            (_is_in_suffix and not coalesce(
                last(case when _is_in_suffix and not _is_partial then not _is_deleted end, true)
                    over (
                        partition by _row_key order by _ref_key
                        rows between unbounded preceding and 1 preceding
                    ),
                _current_is_live
            ))
            or (not _is_in_suffix and _is_candidate and not _current_is_live)
        ) as _is_rejected
    from applicable

),

reset as (

    select
        *,
        max(case when not _is_partial and _is_in_suffix then _ref_key end)
            over (partition by _row_key) as _reset_ref_key
    from classified
    where _is_in_suffix or _is_rejected

),

folded as (

    select
        _row_key,
        coalesce(max(_ref_key) filter (where not _is_rejected), first(_current_ref_key))
            as _ref_key,
        coalesce(
            max_by(not _is_deleted, case when not _is_partial and not _is_rejected then _ref_key end),
            first(_current_is_live)
        ) as _is_live,
        first(_current_is_live) as _was_live,
        count(*) filter (where not _is_rejected) as _applied_changes,
        {%- for column in columns %}
        coalesce(
            max_by(
                named_struct('value', {{ column }}),
                case
                    when not _is_rejected
                        and _ref_key >= coalesce(_reset_ref_key, _ref_key)
                        and (not _is_partial or array_contains(_changed_columns, '{{ column }}'))
                        then _ref_key
                end
            ),
            named_struct('value', first(_current__{{ column }}))
        ).value as {{ column }},
        {%- endfor %}
        max_by(_event_ts, _ref_key) filter (where not _is_rejected) as _event_ts,
        max_by(_source, _ref_key) filter (where not _is_rejected) as _source,
        max_by(_data_center, _ref_key) filter (where not _is_rejected) as _data_center,
        filter(
            collect_list(
                case when _is_rejected then named_struct(
                    '_ref_key', _ref_key,
                    '_kafka_partition', _kafka_partition,
                    '_kafka_offset', _kafka_offset,
                    'error_source_data', _source_data
                ) end
            ),
            rejected -> rejected is not null
        ) as _rejected
    from reset
    group by _row_key

),

final as (

    select
        _row_key,
        {%- for column in columns %}
        {{ column }},
        {%- endfor %}
        _ref_key,
        not _is_live as _is_deleted,
        _event_ts,
        _source,
        _data_center,
        cast({{ batch_id }} as bigint) as _batch_id,
        case
            when _applied_changes = 0 then 'none'
            when _is_live and _was_live then 'update'
            when _is_live then 'insert'
            when _was_live then 'delete'
            else 'tombstone'
        end as _merge_action,
        _rejected
    from folded

)

select * from final
{%- endmacro %}
