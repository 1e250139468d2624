"""The history table's writer: one commit per batch, from the batch's valid changes.

Called on both of the runner's paths (python_ingest/steps/history/rules.py says what is written):

* the batch path (steps/batch.py ``_merge``): after the index, before the lake's upsert, from
  the valid rows the fork holds for the batch;
* the step tables' path (steps/pipeline.py): after the lake model's dbt runs, every batch the
  lake merged and the history has not, from ``staging.<model>__valid``.

Either way a batch is written once: its commit carries ``sluice.history.batch_id``, and a
batch at or below that checkpoint is skipped. That checkpoint, not the fold, is what makes it
exactly once: the record key (``_row_key``, ``_ref_key``) makes most of a batch written again
the same rows, but not a forced change under ``hard_deletes='new_record'``, whose delete
version takes its values from the current version, which after the batch is the batch's own
later change. A job whose lake model does not ask for a history pays nothing: ``options`` is
None and no statement runs.

What a batch costs (a small batch's history should cost about one commit, issue #52): the
process holds, per history table, its checkpoint, its columns and, while it has at most
``HELD_ROWS`` versions, every version, all valid only while the table's history ends where
it ended after this process's last commit (its position, ``formats.position``: any other
commit, a table service, another process, a restart, makes the next batch read the table
again). A batch with the process's state in hand then reads nothing: not the checkpoint, not
the table's schema, not the stored versions of its keys. Its commit is an upsert of the
versions written (on Hudi: no join with the table, as the lake's upsert); a batch that
removes versions (a forced change replacing them) commits one MERGE, removal and upsert
together.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from python_ingest.config.table_formats import session_format
from python_ingest.exceptions import PipelineError
from python_ingest.runtime.budget import over_budget
from python_ingest.runtime.catalog import (
    INSERT_OPERATION,
    insert_operation_kept,
)
from python_ingest.runtime.faults import fault_point
from python_ingest.steps.history.fold import Options, Outcome, as_time, history_batch
from python_ingest.steps.history.rules import EXTRA_COLUMNS, HISTORY_STEP
from python_ingest.steps.merge.changeset import FRAMEWORK
from python_ingest.tables.checkpoints import step_checkpoint, step_properties
from python_ingest.tables.evolve import widen, wider_columns
from python_ingest.tables.formats import committing, position, table_exists, table_format
from python_ingest.tables.lease import check_held

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from python_ingest.steps.dbt import Dbt
    from python_ingest.tables.names import JobTables

log = logging.getLogger(__name__)
NOT_COPIED = ("_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key",
              "_hoodie_partition_path", "_hoodie_file_name", "_hoodie_is_deleted", "_merged_at")
# a history of at most this many versions is held in memory between batches (its stored
# versions are then not read per batch); more: each batch reads its keys' versions. The
# histories one process holds keep at most HELD_TOTAL versions together (about 1 KB each):
# past it the least recently written are dropped, and read by key from then on
HELD_ROWS = int(os.environ.get("SLUICE_HISTORY_HELD_ROWS", "50000"))
HELD_TOTAL = int(os.environ.get("SLUICE_HISTORY_HELD_TOTAL", "200000"))


@dataclass
class _Held:
    """What this process knows of a history table while its position is ``position``."""

    position: str | None
    checkpoint: int
    shape: Shape  # the columns it has (ensured)
    versions: dict[str, list[dict[str, Any]]] | None  # every version by row key (None: many)
    count: int = 0  # how many versions
    used: float = 0.0  # when a batch last wrote it (time.monotonic)


_held: dict[str, _Held] = {}
_many: set[str] = set()  # histories found to hold more than HELD_ROWS versions
_lock = threading.Lock()


def options(dbt: Dbt, tables: JobTables) -> Options | None:
    """The lake model's history config (None: it keeps no history)."""
    model = tables.models.lake if tables.models else None
    config = dbt.model_config(model) if model is not None else None
    if config is None or config.get("materialized") != "lake_merge":
        return None
    return options_of(config, f"lake model {model}")


def options_of(config: Any, where: str) -> Options | None:
    """History options from a lake model's config (anything with ``get``), checked."""
    if not config.get("history", False):
        return None
    hard_deletes = config.get("hard_deletes", "invalidate")
    if hard_deletes not in ("invalidate", "new_record"):
        raise PipelineError(f"{where}: hard_deletes is {hard_deletes!r}; set it to "
                            "'invalidate' (a delete closes the current version) or "
                            "'new_record' (a delete opens a deleted version)")
    tracked, untracked = config.get("track_history_on"), config.get("track_history_except")
    if tracked is not None and untracked is not None:
        raise PipelineError(f"{where}: set track_history_on or track_history_except, not both")
    track = frozenset(tracked) if tracked is not None else None
    try:
        sentinel = as_time(config.get("valid_to_current"))
    except ValueError:
        raise PipelineError(f"{where}: valid_to_current is not a timestamp; write it as "
                            "'9999-12-31' or '9999-12-31T00:00:00', or leave it out for "
                            "NULL") from None
    return Options(hard_deletes, track, sentinel, frozenset(untracked or ()))


@dataclass(frozen=True)
class Shape:
    """The history's columns (name, type), from the lake's, and the payload among them."""

    columns: tuple[tuple[str, str], ...]
    payload: tuple[str, ...]


def shape(spark: SparkSession, lake: str, incoming: Mapping[str, str] | None = None,
          added: Sequence[tuple[str, str]] = ()) -> Shape:
    """The history's columns from the lake's, with the types the batch's valid rows
    (``incoming``: {name: type}) widen and the columns (name, type) the lake is about to gain
    (``added``) after them: the batch path writes the history before the lake's upsert widens
    the lake's columns (tables/evolve.py) and adds its new ones, at its end, as here."""
    lake_columns = wider_columns([(f.name, f.dataType.simpleString())
                                  for f in spark.table(lake).schema
                                  if f.name not in NOT_COPIED], incoming or {},
                                 session_format(spark).name)
    have = {n.lower() for n, _ in lake_columns}
    lake_columns += [(n, t) for n, t in added if n.lower() not in have and n not in NOT_COPIED]
    payload = tuple(n for n, _ in lake_columns if n not in FRAMEWORK)
    return Shape((*lake_columns, *EXTRA_COLUMNS), payload)


def ensure(spark: SparkSession, history: str, found: Shape) -> None:
    """Create the history table (merge-on-read, keyed (_row_key, _ref_key)), or add the
    columns the lake gained since and widen those whose type the lake's widened."""
    if table_exists(spark, history):
        schema = spark.table(history).schema
        present = {c.lower() for c in schema.names}
        widen(spark, history, found.columns, schema)  # evolve.py: a wider type, or refused
        for name, kind in found.columns:
            if name.lower() not in present:
                log.info("history %s gains column %s %s", history, name, kind)
                spark.sql(f"alter table {history} add column `{name}` {kind}")
        return
    ddl = ", ".join(f"`{n}` {t}" for n, t in found.columns)
    table_format(spark).create_history(spark, history, ddl)  # the format's own DDL
    log.info("created history table %s", history)


def write_batch(spark: SparkSession, tables: JobTables, opts: Options, batch_id: int,
                changes: Sequence[Mapping[str, Any]] | None, valid: str,
                added: Sequence[tuple[str, str]] = ()) -> int:
    """The batch's versions committed to the history (``changes``: its valid rows when the
    caller holds them, else read from the table or view ``valid``; ``added``: the columns the
    lake gains after this commit, ``shape``); the rows written."""
    history, lake = tables.history, tables.lake
    assert history is not None and lake is not None
    timer, seconds = time.perf_counter(), {}

    def lap(name: str) -> None:
        nonlocal timer
        now = time.perf_counter()
        seconds[name], timer = round(now - timer, 3), now

    with _lock:
        held = _held.get(history)
    if held is not None and held.position != position(spark, history):
        held = None  # another commit since this process's last: read the table again
    done = held.checkpoint if held is not None else step_checkpoint(spark, history,
                                                                   HISTORY_STEP)
    if done >= batch_id:
        return 0  # committed before a kill: not again
    lap("checkpoint")
    fault_point("before_history")  # the step tables' path: after the lake's commit
    incoming = {f.name: f.dataType.simpleString() for f in spark.table(valid).schema}
    found = shape(spark, lake, incoming, added)
    if held is None or held.shape != found:
        ensure(spark, history, found)
    lap("shape")
    if changes is None:
        changes = [r.asDict() for r in spark.sql(
            f"select * from {valid} where _batch_id = {batch_id}").collect()]
    lap("changes")
    keys = sorted({c["_row_key"] for c in changes if c.get("_row_key") is not None})
    versions = held.versions if held is not None and found == held.shape else None
    if versions is None and history not in _many:
        versions = _read_all(spark, history)  # few versions: held from now on
    if versions is not None:
        stored = {k: versions[k] for k in keys if k in versions}
    else:
        stored = _read_keys(spark, history, keys)
    lap("stored")
    outcome = history_batch(_complete(changes), stored, found.payload, batch_id, opts)
    lap("fold")
    check_held(tables.job)
    with _lock:
        _held.pop(history, None)  # until the commit is known to have happened
    batch = committing(spark, step_properties(HISTORY_STEP, batch_id),
                       lambda: _commit(spark, history, found, outcome, batch_id))
    lap("commit")
    if versions is not None:  # as the table holds them (Spark's types: a float's 32 bits)
        names = [n for n, _ in found.columns]
        _apply(versions, [{n: r[n] for n in names} for r in batch.collect() if not r["_drop"]],
               outcome.remove)
        lap("read_back")
    count = sum(len(v) for v in versions.values()) if versions is not None else 0
    if count > HELD_ROWS:
        versions, count = None, 0
        _many.add(history)
    with _lock:
        _held[history] = _Held(position(spark, history), batch_id, found, versions, count,
                               time.monotonic())
        _evict(history)
    lap("held")
    log.info("history batch %d of %s: %d versions written, %d removed; seconds %s", batch_id,
             history, len(outcome.write), len(outcome.remove), seconds)
    fault_point("after_history_commit")
    return len(outcome.write)


def _evict(keep: str) -> None:
    """Drop the versions of the least recently written histories but ``keep`` while all held
    hold more than HELD_TOTAL (under ``_lock``); those read their keys' versions from then on."""
    holding = {name: h for name, h in _held.items() if h.versions is not None}
    for history in over_budget(holding, lambda h: h.count, lambda h: h.used, HELD_TOTAL, keep):
        held = _held[history]
        held.versions, held.count = None, 0
        _many.add(history)
        log.info("history %s: its versions no longer held in memory (the histories held "
                 "exceed %d versions, SLUICE_HISTORY_HELD_TOTAL)", history, HELD_TOTAL)


def driver_valid(spark: SparkSession, valid: str,
                 small: Mapping[int, Sequence[Mapping[str, Any]]] | None,
                 batch_id: int) -> list[dict[str, Any]] | None:
    """The batch's valid rows from those the batch path holds on the driver (``small``:
    steps/merge/driver.py ``driver_rows``, timestamps and dates as numbers), as ``collect`` gives
    them; None when it holds none (the writer then reads the view)."""
    if small is None:
        return None
    from python_ingest.steps.merge.driver import transport

    travel = transport(spark.table(valid).schema)
    return None if travel is None else travel.as_collected(small.get(batch_id, ()))


def _read_all(spark: SparkSession, history: str) -> dict[str, list[dict[str, Any]]] | None:
    """Every version of ``history`` by row key, when it has at most HELD_ROWS (else None)."""
    if not table_exists(spark, history):
        return {}
    found = spark.sql(f"select * from {history} limit {HELD_ROWS + 1}").collect()
    if len(found) > HELD_ROWS:
        _many.add(history)  # not read whole again by this process (histories grow)
        log.info("history %s has more than %d versions: not held in memory (each batch reads "
                 "its keys' versions)", history, HELD_ROWS)
        return None
    versions: dict[str, list[dict[str, Any]]] = {}
    for row in found:
        versions.setdefault(row["_row_key"], []).append(_own(row.asDict()))
    return versions


def _read_keys(spark: SparkSession, history: str, keys: Sequence[str]
               ) -> dict[str, list[dict[str, Any]]]:
    """The stored versions of ``keys``, by row key."""
    stored: dict[str, list[dict[str, Any]]] = {}
    if not keys:
        return stored
    spark.createDataFrame([(k,) for k in keys], "_row_key string") \
        .createOrReplaceTempView("sluice_history_keys")
    for row in spark.sql(f"select * from {history} where _row_key in "
                         "(select _row_key from sluice_history_keys)").collect():
        stored.setdefault(row["_row_key"], []).append(_own(row.asDict()))
    return stored


def _own(row: dict[str, Any]) -> dict[str, Any]:
    """A stored version without the format's bookkeeping columns."""
    return {k: v for k, v in row.items() if not k.startswith("_hoodie_")}


def _apply(versions: dict[str, list[dict[str, Any]]], written: list[dict[str, Any]],
           removed: Sequence[tuple[str, int]]) -> None:
    """The held versions after a commit: ``written`` upserted (as the table reads them
    back), ``removed`` gone."""
    gone = set(removed)
    changed = {(r["_row_key"], r["_ref_key"]) for r in written}
    for row_key in {k for k, _ in gone} | {k for k, _ in changed}:
        kept = [v for v in versions.get(row_key, ())
                if (row_key, v["_ref_key"]) not in gone | changed]
        kept += [r for r in written if r["_row_key"] == row_key]
        if kept:
            versions[row_key] = kept
        else:
            versions.pop(row_key, None)


def _complete(changes: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """NULL flags as the merge reads them (coalesced), rows without a key left out."""
    return [{**c, "_is_deleted": bool(c.get("_is_deleted")),
             "_force_update": bool(c.get("_force_update"))}
            for c in changes if c.get("_row_key") is not None and c.get("_ref_key") is not None]


def _commit(spark: SparkSession, history: str, found: Shape, outcome: Outcome,
            batch_id: int) -> DataFrame:
    """One commit: the written versions upserted, the replaced ones removed (an empty commit
    when the batch changed nothing, so the checkpoint moves); the rows it wrote, a frame
    flagging the removed ones (``_drop``). On Hudi a batch that removes nothing is an upsert
    (a MERGE joins the batch with the whole table first); otherwise one MERGE."""
    names = [n for n, _ in found.columns]
    schema = ", ".join(f"`{n}` {t}" for n, t in found.columns) + ", `_drop` boolean"
    # a removed version's ordering value (_batch_id): Hudi refuses a NULL one, and its log
    # merge drops a delete ordered below the record it removes, whatever the merge mode
    removed = [{"_row_key": key, "_ref_key": ref, "_batch_id": batch_id}
               for key, ref in outcome.remove]
    rows = [(*(r.get(n) for n in names), drop)
            for group, drop in ((outcome.write, False), (removed, True)) for r in group]
    batch = spark.createDataFrame(rows, schema)
    batch.createOrReplaceTempView("sluice_history_batch")
    setters = ", ".join(f"t.`{n}` = s.`{n}`" for n in names)
    values = ", ".join(f"s.`{n}`" for n in names)
    quoted = ", ".join(f"`{n}`" for n in names)
    with insert_operation_kept(spark):
        if not removed and session_format(spark).upserts_by_insert:
            spark.conf.set(INSERT_OPERATION, "upsert")
            spark.sql(f"insert into {history} ({quoted}) select {quoted} "
                      "from sluice_history_batch")
        else:
            spark.sql(f"merge into {history} t using sluice_history_batch s "
                      "on t._row_key = s._row_key and t._ref_key = s._ref_key "
                      # the update's own condition: Hudi 1.0.2 applied an unconditioned
                      # update clause to a row the delete clause matched (a row of NULLs)
                      "when matched and s._drop then delete "
                      f"when matched and not s._drop then update set {setters} "
                      f"when not matched and not s._drop then insert ({quoted}) "
                      f"values ({values})")
    return batch


def catch_up(spark: SparkSession, dbt: Dbt | None, tables: JobTables, done: int | None = None,
             opts: Options | None = None) -> None:
    """Every batch up to ``done`` (the lake's merge checkpoint; read when None) the history
    lacks, from ``staging.<model>__valid``: the step tables' path writes the history after the
    lake, and a kill between them leaves it behind (a new history starts at the oldest batch
    that table keeps)."""
    opts = opts if dbt is None else options(dbt, tables)
    if opts is None or tables.history is None or tables.lake is None \
            or not table_exists(spark, tables.lake):
        return
    if done is None:
        from python_ingest.steps.merge.index import MERGE_STEP

        done = step_checkpoint(spark, tables.lake, MERGE_STEP)
    if not table_exists(spark, tables.valid):
        return  # nothing to catch up from (the batch path keeps no valid rows)
    if table_exists(spark, tables.history):
        start = step_checkpoint(spark, tables.history, HISTORY_STEP) + 1
    else:  # turned on now: from the valid rows kept
        first = spark.sql(f"select min(_batch_id) from {tables.valid}").collect()[0][0]
        start = int(first) if first is not None else done + 1
    for batch_id in range(start, done + 1):
        write_batch(spark, tables, opts, batch_id, None, tables.valid)

