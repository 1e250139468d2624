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
  before it) updates that version in place and opens none;
* time tiles without gap or overlap: ``_valid_from`` is ``max(_event_ts, predecessor's
  _valid_from)``, so a backward source clock (or equal commit times) gives the predecessor an
  empty interval [t, t) instead of a negative one; each version's ``_valid_to`` is its
  successor's ``_valid_from``. With ``invalidate`` the only gaps are where the key did not
  exist (between a delete and a re-insert).

Written in the same batch as the lake from the same valid changes (``staging.<model>__valid``
rows of the batch; steps/history_writer.py: the runner's batch path before the lake's commit, its
step tables' path and a plain ``dbt run`` after it), one commit per batch carrying the
checkpoint
``sluice.history.batch_id``: a batch whose history committed before a kill is not written again
(and were it, the record key makes it the same rows). Keys whose history began before the table
was turned on have no versions before their first change since (turn it on with the lake).

Left as they are: with ``track_history_on``, a change absorbed into the current version
leaves no ref key of its own, so a later change older than it but newer than the version
opens a version the lake did not apply. The current versions equal the
lake's live rows after every batch (``sluice verify --history`` checks it).
"""

from __future__ import annotations

HISTORY_STEP = "history"
EXTRA_COLUMNS = (("_valid_from", "timestamp"), ("_valid_to", "timestamp"),
                 ("_is_current", "boolean"), ("_closed_ref_key", "bigint"),
                 ("_closed_batch_id", "bigint"))
