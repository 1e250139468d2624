"""History tables (issue #52): every change of a lake row as a version, from the source's clock.

Asked for on the lake model: ``config(history=true)``, with optional ``track_history_on``
(a list of columns; or ``track_history_except``: all but these), ``hard_deletes``
(``invalidate``, the default, or ``new_record``) and ``valid_to_current`` (a timestamp literal
the current version's ``_valid_to`` holds instead of NULL).

The table: ``lake.<lake model>__history`` (``tables.names.JobTables.history``), record key
(``_row_key``, ``_ref_key``): re-applying a batch rewrites the same rows, so it is idempotent.
One row per version of a key:

=====================  ========================================================================
column                 meaning
=====================  ========================================================================
the lake's columns     the row's values after the change that opened the version (``_row_key``,
                       the payload, ``_source``, ``_data_center``)
``_ref_key``           the ref key of the change that opened the version (source order)
``_event_ts``          that change's commit time at the source (binlog event time, PostgreSQL
                       commit time, Debezium ``source.ts_ms``, the changelog's event time;
                       never the load time)
``_valid_from``        when the version starts: its ``_event_ts``, or its predecessor's
                       ``_valid_from`` when the source clock went backwards (see below)
``_valid_to``          the next version's ``_valid_from`` (or the invalidating delete's time);
                       NULL for the current version, or ``valid_to_current``
``_is_current``        the key's newest version, not closed by a delete
``_is_deleted``        a delete version (``hard_deletes: new_record``: a delete opens a
                       version carrying the row as it was; with ``invalidate`` it only closes
                       the current version; a delete with no version to close, one that
                       arrived before its insert, is kept as a marker row: deleted, never
                       current, ``_valid_to`` = ``_valid_from``, so older changes stay stale)
``_batch_id``          the batch that opened the version; never changed afterwards (the change
                       feed filters on it)
``_closed_ref_key``    the ref key of the change that closed the version (the next version's,
                       or an invalidating delete's); NULL while open
``_closed_batch_id``   the batch that closed it (last moved its end); NULL while open
``_last_ref_key``      the ref key of the newest change whose values the version holds: its
                       own, or (``track_history_on``) the newest change absorbed into it; NULL
                       in rows written before the column existed (read as ``_ref_key``)
``_last_event_ts``     that change's commit time at the source
=====================  ========================================================================

Rules (``fold.py``, the reference; the merge's rules from macros/sluice_merge_changes.sql):

* versions of a key are ordered by ``_ref_key``; every change is a version, two updates of a
  key in one batch are two versions; copies of one change (same ref key) count once, and a
  change whose ref key the key's history already holds (a version, or an invalidating delete)
  changes nothing, unless forced;
* a late change (older than the key's newest version, not forced) is spliced between its
  neighbours: its predecessor now ends where it starts, it ends where its successor starts;
  it does not change its successors' values (the lake never applied it, and the current
  version stays the lake's row);
* a forced change (``_force_update``), as the merge applies it to the current row: the versions
  from its ref key on are replaced, its version is the current row with its changes;
* a partial update carries its unchanged columns from the version before (a partial update
  with no live version before it is not a version: the merge rejects it);
* a delete closes the current version (``invalidate``) or opens a deleted one (``new_record``);
  a change after it opens a new version (re-insert); TRUNCATE reaches sluice as a delete of
  every live row with one ref key, so it closes every current version;
* ``track_history_on``: a change that alters none of the tracked columns (against the version
  before it) opens none: it is absorbed into that version, which takes its values and its ref
  key as ``_last_ref_key`` when it is newer than the version's ``_last_ref_key``, and is left
  as it is otherwise (the version holds a newer change's values already, as the lake does);
  the rule for changes older than what a version absorbed is below;
* time tiles without gap or overlap: ``_valid_from`` is ``max(_event_ts, predecessor's
  _valid_from)``, so a backward source clock (or equal commit times) gives the predecessor an
  empty interval [t, t) instead of a negative one; each version's ``_valid_to`` is its
  successor's ``_valid_from``. With ``invalidate`` the only gaps are where the key did not
  exist (between a delete and a re-insert).

Written in the same batch as the lake from the same valid changes (``staging.<model>__valid``
rows of the batch; steps/history/writer.py: the runner's batch path before the lake's commit, its
step tables' path and a plain ``dbt run`` after it), one commit per batch carrying the
checkpoint
``sluice.history.batch_id``: a batch whose history committed before a kill is not written again
(and were it, the record key makes it the same rows). Keys whose history began before the table
was turned on have no versions before their first change since (turn it on with the lake).

Absorbed changes (``track_history_on``): a version V opened by change ``r0`` that absorbed
changes up to ``last`` (its ``_last_ref_key``) holds the values after ``last``, as the lake row
does while V is current (the lake's ref key is then ``last``). A change ``r`` with
``r0 < r < last`` (not forced) arriving later:

* when ``r`` is a version's or a still absorbed change's ref key (``last``), it is a repeat and
  changes nothing;
* when it alters none of the tracked columns against V it changes nothing (V's values are a
  newer change's; a repeat of an earlier absorbed change is such a change);
* otherwise (it alters a tracked column, or it is a delete) it is spliced in as any late
  change: V ends at ``r``, ``r``'s version (or delete) follows, and after it a version opened
  by ``last`` (``_ref_key`` = ``_last_ref_key`` = ``last``, ``_event_ts`` = V's
  ``_last_event_ts``, the batch's ``_batch_id``) carries V's values: the change does not
  change what comes after it, and when V was current that version is current and equals the
  lake's row. Which absorbed changes lay between ``r0`` and ``r`` is not kept, so V keeps its
  values and ``_last_ref_key`` (now past its end: later changes in V's range that alter no
  tracked column change nothing), and the version after ``r`` starts at ``last``, the first
  absorbed change sluice knows of after ``r``.

A forced change at or below a version's ``_last_ref_key`` replaces the versions from its ref
key on, as above; the version before it keeps its values and ``_last_ref_key``, and a change
later re-delivered with that ref key is no repeat (the merge applies it again after the
forced one). The current versions equal the lake's live rows after every batch (``sluice
verify --history`` checks it).
"""

from __future__ import annotations

HISTORY_STEP = "history"
EXTRA_COLUMNS = (("_valid_from", "timestamp"), ("_valid_to", "timestamp"),
                 ("_is_current", "boolean"), ("_closed_ref_key", "bigint"),
                 ("_closed_batch_id", "bigint"), ("_last_ref_key", "bigint"),
                 ("_last_event_ts", "timestamp"))
