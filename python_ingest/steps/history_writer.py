"""The history table's writer: one commit per batch, from the batch's valid changes.

Called on both of the runner's paths (python_ingest/steps/history.py says what is written):

* the batch path (steps/batch.py ``_merge``): after the index, before the lake's upsert, from
  the valid rows the fork holds for the batch;
* the step tables' path (steps/pipeline.py): after the lake model's dbt runs, every batch the
  lake merged and the history has not, from ``staging.<model>__valid``.

Either way a batch is written once: its commit carries ``sluice.history.batch_id``, and a
batch at or below that checkpoint is skipped; were it written again (the record key is
(``_row_key``, ``_ref_key``) and the fold of the same changes over the same versions gives
the same rows), nothing would change. A job whose lake model does not ask for a history pays
nothing: ``options`` is None and no statement runs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from python_ingest.exceptions import PipelineError
from python_ingest.runtime.catalog import FORMAT_CONF, insert_operation_kept, location
from python_ingest.runtime.faults import fault_point
from python_ingest.steps.changeset import FRAMEWORK
from python_ingest.steps.history import EXTRA_COLUMNS, HISTORY_STEP
from python_ingest.steps.history_fold import Options, Outcome, as_time, history_batch
from python_ingest.tables.checkpoints import step_checkpoint, step_properties
from python_ingest.tables.formats import committing, table_exists
from python_ingest.tables.lease import check_held

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from python_ingest.steps.dbt import Dbt
    from python_ingest.tables.names import JobTables

log = logging.getLogger(__name__)
NOT_COPIED = ("_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key",
              "_hoodie_partition_path", "_hoodie_file_name", "_hoodie_is_deleted", "_merged_at")
BUCKETS = 4


def options(dbt: Dbt, tables: JobTables) -> Options | None:
    """The lake model's history config (None: it keeps no history)."""
    model = tables.models.lake if tables.models else None
    if model is None:
        return None
    node = next((n for n in dbt.manifest().nodes.values()
                 if getattr(n, "resource_type", None) is not None and n.name == model
                 and n.config.materialized == "lake_merge"), None)
    if node is None:
        return None
    return options_of(node.config, f"lake model {model} ({node.original_file_path})")


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


def shape(spark: SparkSession, lake: str) -> Shape:
    lake_columns = [(f.name, f.dataType.simpleString()) for f in spark.table(lake).schema
                    if f.name not in NOT_COPIED]
    payload = tuple(n for n, _ in lake_columns if n not in FRAMEWORK)
    return Shape((*lake_columns, *EXTRA_COLUMNS), payload)


def ensure(spark: SparkSession, history: str, found: Shape) -> None:
    """Create the history table (merge-on-read, keyed (_row_key, _ref_key)), or add the
    columns the lake gained since."""
    if table_exists(spark, history):
        present = {c.lower() for c in spark.table(history).columns}
        for name, kind in found.columns:
            if name.lower() not in present:
                log.info("history %s gains column %s %s", history, name, kind)
                spark.sql(f"alter table {history} add column `{name}` {kind}")
        return
    ddl = ", ".join(f"`{n}` {t}" for n, t in found.columns)
    if spark.conf.get(FORMAT_CONF, "hudi") == "hudi":
        spark.sql(f"create table {history} ({ddl}) using hudi location "
                  f"'{location(spark, history)}' tblproperties (type='mor', "
                  "primaryKey='_row_key,_ref_key', preCombineField='_batch_id', "
                  "'hoodie.record.merge.mode'='COMMIT_TIME_ORDERING', "
                  "'hoodie.index.type'='BUCKET', "
                  f"'hoodie.bucket.index.num.buckets'='{BUCKETS}', "
                  "'hoodie.bucket.index.hash.field'='_row_key', "
                  "'hoodie.compact.inline'='false')")
    else:
        spark.sql(f"create table {history} ({ddl}) using iceberg tblproperties "
                  "('format-version'='2', 'write.delete.mode'='merge-on-read', "
                  "'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read')")
    log.info("created history table %s", history)


def write_batch(spark: SparkSession, tables: JobTables, opts: Options, batch_id: int,
                changes: Sequence[Mapping[str, Any]] | None, valid: str) -> int:
    """The batch's versions committed to the history (``changes``: its valid rows when the
    caller holds them, else read from the table or view ``valid``); the rows written."""
    history, lake = tables.history, tables.lake
    assert history is not None and lake is not None
    if step_checkpoint(spark, history, HISTORY_STEP) >= batch_id:
        return 0  # committed before a kill: not again
    fault_point("before_history")  # the step tables' path: after the lake's commit
    found = shape(spark, lake)
    ensure(spark, history, found)
    if changes is None:
        changes = [r.asDict() for r in spark.sql(
            f"select * from {valid} where _batch_id = {batch_id}").collect()]
    stored: dict[str, list[dict[str, Any]]] = {}
    keys = sorted({c["_row_key"] for c in changes if c.get("_row_key") is not None})
    if keys:
        spark.createDataFrame([(k,) for k in keys], "_row_key string") \
            .createOrReplaceTempView("sluice_history_keys")
        for row in spark.sql(f"select * from {history} where _row_key in "
                             "(select _row_key from sluice_history_keys)").collect():
            stored.setdefault(row["_row_key"], []).append(row.asDict())
    outcome = history_batch(_complete(changes), stored, found.payload, batch_id, opts)
    check_held(tables.job)
    committing(spark, step_properties(HISTORY_STEP, batch_id),
               lambda: _commit(spark, history, found, outcome))
    fault_point("after_history_commit")
    return len(outcome.write)


def _complete(changes: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """NULL flags as the merge reads them (coalesced), rows without a key left out."""
    return [{**c, "_is_deleted": bool(c.get("_is_deleted")),
             "_force_update": bool(c.get("_force_update"))}
            for c in changes if c.get("_row_key") is not None and c.get("_ref_key") is not None]


def _commit(spark: SparkSession, history: str, found: Shape, outcome: Outcome) -> None:
    """One MERGE: the written versions upserted, the replaced ones removed (an empty commit
    when the batch changed nothing, so the checkpoint moves)."""
    names = [n for n, _ in found.columns]
    schema = ", ".join(f"`{n}` {t}" for n, t in found.columns) + ", `_drop` boolean"
    removed = [{"_row_key": key, "_ref_key": ref} for key, ref in outcome.remove]
    rows = [(*(r.get(n) for n in names), drop)
            for group, drop in ((outcome.write, False), (removed, True)) for r in group]
    spark.createDataFrame(rows, schema).createOrReplaceTempView("sluice_history_batch")
    setters = ", ".join(f"t.`{n}` = s.`{n}`" for n in names)
    values = ", ".join(f"s.`{n}`" for n in names)
    quoted = ", ".join(f"`{n}`" for n in names)
    with insert_operation_kept(spark):
        spark.sql(f"merge into {history} t using sluice_history_batch s "
                  "on t._row_key = s._row_key and t._ref_key = s._ref_key "
                  "when matched and s._drop then delete "
                  f"when matched then update set {setters} "
                  f"when not matched and not s._drop then insert ({quoted}) values ({values})")


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
        from python_ingest.steps.index import MERGE_STEP

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

