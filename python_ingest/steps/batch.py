"""The batch path: raw rows to the lake in one pass, with no step tables and no dbt run.

    raw.<job> batches (lake checkpoint, raw checkpoint]
      → the converter's compiled SQL, a view over those raw rows     (no table, no commit)
      → the fork in one Spark pass (steps/fork/split.py split)             errors.<job> only when a
                                                                       row failed (fork ckpt)
      → the lake model's compiled change set, per batch, in memory   (no table, no commit)
      → errors.<job> (rejected partial updates, rare), the global
        index, the lake's upsert                                     merge checkpoint in each

dbt stays where users author: the converter and the lake model are compiled by dbt once per
job (steps/compiled.py) (``dbt compile`` on the parsed project, with placeholders for the batch: var
``sluice_compile``) and compiled again when a model, macro or var changes, or when the
converter's columns or the lake's columns change. Each batch then runs their SQL on the job's
own session, so jobs of one runner run truly in parallel (a dbt invocation holds a
process-wide lock). Commits per batch when nothing fails: raw (ingest) and the lake, whose
commit carries a small batch's index entries (steps/merge/index.py ``catch_up`` writes them to the
index table every few batches); a batch the lake model's SQL merges commits the index too.

It applies to a Hudi lake written by upsert into its hash buckets (the default: lake_index
bucket) and to an Iceberg lake written by MERGE (not with keep_tombstones), from the job's
first batch on (``create_lake`` creates the lake as the lake_merge materialization would),
unless the job asks for its step tables (``keep_step_tables: true``); otherwise the steps run
as before (steps/pipeline.py: the converter and the lake model through dbt, the staging and
valid tables written), which is what a plain ``dbt run`` does. Both build the same lake from
the same events (tests/steps/test_batch_path.py).

Exactly once: every commit carries its step's checkpoint and each step starts from the
checkpoints, as on the step tables' path: the fork's error rows of batches the error table
already holds (``sluice.fork.batch_id``) are not written again, and a batch whose index or
rejected rows committed before a kill is merged again without them (``sluice.merge.batch_id``);
the converter and the suite are deterministic on the raw rows, so a batch redone after a kill
forks and merges exactly as it would have.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from python_ingest.config.table_formats import session_format
from python_ingest.runtime.catalog import insert_operation_kept
from python_ingest.runtime.faults import fault_point
from python_ingest.steps.compiled import (
    BATCH_FROM,
    BATCH_ID,
    BATCH_TO,
    CONSTRAINTS,
    LAKE_BOOKKEEPING,
    PARTIAL_KEYS,
    CompiledJob,
    compile_job,
    converted_rows,
    create_lake,
    new_lake_index,
)
from python_ingest.steps.fork.split import ERROR_COLUMNS, DocsJob, finish_fork, split
from python_ingest.steps.history import writer as history_writer
from python_ingest.steps.merge import index_cache
from python_ingest.steps.merge.changeset import Declined
from python_ingest.steps.merge.driver import ChangeSet, driver_changes, driver_rows, quoted
from python_ingest.steps.merge.index import (
    CATCH_UP_BATCHES,
    MERGE_STEP,
    ensure_index,
    entries_property,
)
from python_ingest.tables.checkpoints import read_checkpoint, step_checkpoint, step_properties
from python_ingest.tables.evolve import widen_known
from python_ingest.tables.formats import committing, ensure_table, table_exists
from python_ingest.tables.lease import check_held

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from python_ingest.config import JobConfig
    from python_ingest.steps.dbt import Dbt
    from python_ingest.tables.names import JobTables
    from python_ingest.tables.runs import Run

log = logging.getLogger(__name__)

PARTIAL_KEYS_LITERAL = 1000  # more partial-update keys than this: a subquery (as the macro)
# a batch the lake model's SQL merged brings at most this many index entries to the index held
# in memory (steps/merge/index_cache.py); more, and the index is read again by the next small batch
HELD_ENTRIES = 200_000
INSERT_OPERATION = "hoodie.spark.sql.insert.into.operation"
# The _ref_key a delete is written with: the largest bigint, so a delete outranks the row it
# removes. _ref_key is the lake's ordering field, and Hudi 1.0.2's log merge drops a delete
# whose ordering value is below the key's record in an earlier log file, whatever the merge
# mode; a forced delete may be older than the row (macros/sluice_lake_row.sql)
DELETE_REF_KEY = ("case when _merge_action = 'delete' then cast(9223372036854775807 as bigint) "
                  "else _ref_key end")


_bucket_lakes: dict[str, bool] = {}  # lake table -> written by upsert into hash buckets


def why_not(spark: SparkSession, job: JobConfig, tables: JobTables,
            dbt: Dbt | None = None) -> str | None:
    """Why the batch path does not apply to ``job`` now (None: it does). A lake not created
    yet is created by the batch path when its model asks for the bucket index (``dbt``
    answers; without it, by the first batch's dbt run)."""
    if job.keep_step_tables:
        return "keep_step_tables is set"
    if tables.lake is None:
        return "the job has no lake model"
    if not (spec := session_format(spark)).bucket_lakes:
        if dbt is None:
            return f"its tables are {spec.title} tables"
        config = dbt.model_config(tables.models.lake) if tables.models is not None \
            and tables.models.lake else None
        if config is not None and config.get("keep_tombstones", False):
            return f"its {spec.title} lake keeps deleted rows (keep_tombstones)"
        return None  # a MERGE into the lake (created here when new)
    if not table_exists(spark, tables.lake):
        _bucket_lakes.pop(tables.lake, None)
        if dbt is None:
            return "its lake table is created by its first batch's dbt run"
        if not new_lake_index(dbt, tables):
            return "its lake keeps Hudi's record-level index (lake_index: record, keep_tombstones)"
        return None
    if tables.lake not in _bucket_lakes:
        found = {r[0]: r[1] for r in spark.sql(f"show tblproperties {tables.lake}").collect()}
        _bucket_lakes[tables.lake] = found.get("hoodie.index.type") == "BUCKET"
    if not _bucket_lakes[tables.lake]:
        return "its lake keeps Hudi's record-level index (lake_index: record, keep_tombstones)"
    return None


def run_batches(spark: SparkSession, dbt: Dbt, job: JobConfig, tables: JobTables, run: Run,
                suite: Path, report_dir: Path | None, cache: dict[str, Any],
                defer: Callable[[DocsJob], None] | None = None) -> str | None:
    """Convert, fork and merge every raw batch the lake has not merged; counts and details to
    ``run`` as the step tables' path records them; returns the report's path."""
    raw = read_checkpoint(spark, tables.raw)
    newest = raw.batch_id if raw else 0
    lake_done = step_checkpoint(spark, tables.lake or "", MERGE_STEP)
    run.details["path"] = "batch"
    history_writer.catch_up(spark, dbt, tables, lake_done)  # a job without history: nothing
    if newest <= lake_done:
        return None
    if not table_exists(spark, tables.lake or ""):
        create_lake(spark, dbt, tables)
    compiled = compile_job(spark, dbt, tables, cache)
    first = lake_done + 1
    converted = converted_rows(spark, compiled.converter.replace(BATCH_FROM, str(first))
                           .replace(BATCH_TO, str(newest)), tables)
    check_held(tables.job)
    ensure_table(spark, tables.errors, ERROR_COLUMNS)
    parts = split(spark, converted, suite, report_dir, f"batch-{first}-{newest}",
                  tables.staging, tables.valid, tables.errors, per_batch=True)
    try:
        check_held(tables.job)
        parts.commit_errors(spark, tables.errors, newest)
        fault_point("after_fork")
        result = finish_fork(parts, lake_done, newest, tables.staging, tables.errors, defer)
        run.count("valid", result.valid)
        run.count("expectation_errors", result.errors)
        run.details["fork"] = {"batches": [first, newest], "rows": result.rows,
                               "quality": result.quality, "report": result.report}
        view = f"sluice_valid__{tables.job}"
        parts.valid.createOrReplaceTempView(view)
        ensure_index(spark, tables)
        merged, totals = [], {"inserted": 0, "updated": 0, "deleted": 0, "merge_errors": 0}
        present = set(compiled.lake_columns)  # the lake's columns, as batches add some
        small = driver_rows(parts.valid)
        history = history_writer.options(dbt, tables)
        for batch_id in parts.batches:
            counts = _merge(spark, compiled, tables, view, batch_id, parts.partial_batches,
                            present, small, history)
            merged.append({"batch_id": batch_id, "skipped": counts.pop("skipped"), **counts})
            counts.pop("seconds"), counts.pop("partial_keys")
            for name in totals:
                totals[name] += counts[name]
        for name, value in totals.items():
            run.count(name, value)
        run.details["merge"] = merged
        spark.catalog.dropTempView(view)
        if step_checkpoint(spark, tables.lake or "", MERGE_STEP) < newest:
            _settle(spark, tables, newest)
        if index_cache.unindexed(tables.index) >= CATCH_UP_BATCHES:
            index_cache.bring_up(spark, tables)
    finally:
        parts.release()
    return result.report


def _merge(spark: SparkSession, compiled: CompiledJob, tables: JobTables, view: str,
           batch_id: int, partial_batches: set[int], present: set[str],
           small: dict[int, list[dict[str, Any]]] | None = None,
           history: history_writer.Options | None = None) -> dict[str, Any]:
    """One batch's change set applied: rejected rows, the index, the lake's upsert, each
    committing the merge checkpoint; what it did, as the step tables' path counts it. The
    change set is folded on the driver when the run's valid rows are ``small`` (and the
    batch is not a rerun of one the index holds), else computed by the lake model's SQL."""
    lake = tables.lake
    assert lake is not None
    skip = [name for name, table in (("errors", tables.errors), ("index", tables.index))
            if step_checkpoint(spark, table, MERGE_STEP) >= batch_id]
    timer = time.perf_counter()
    timings: dict[str, float] = {}
    computed = None
    if small is not None and not skip:
        try:
            sql = (compiled.change_set.replace(compiled.valid, view)
                   .replace(BATCH_ID, str(batch_id)).replace(PARTIAL_KEYS, "NULL"))
            computed = driver_changes(spark, sql, compiled.key, tables, view, batch_id,
                                      small.get(batch_id, []))
        except Declined as why:
            log.info("batch %d of %s takes the lake model's SQL: %s", batch_id, tables.job, why)
    if computed is None:
        index_cache.complete(spark, tables)  # the lake model's SQL reads the index table
        computed = _sql_changes(spark, compiled, view, batch_id, partial_batches)
    changes, figures = computed.changes, computed.figures
    # a change set folded on the driver: its entries ride in the lake commit (steps/merge/index.py)
    deferred = computed.entries is not None and bool(figures["written"]) and not skip
    try:
        timings["change_set_s"] = time.perf_counter() - timer
        name = f"sluice_changes__{tables.job}"
        changes.createOrReplaceTempView(name)
        if figures["rejected"] and "errors" not in skip:
            check_held(tables.job)
            committing(spark, step_properties(MERGE_STEP, batch_id),
                       lambda: spark.sql(_rejected_sql(name, tables.errors, lake)))
        if figures["changed"] and "index" not in skip and not deferred:
            index_cache.complete(spark, tables)  # its checkpoint must not pass theirs
            entries = computed.entries
            if entries is None and figures["changed"] <= HELD_ENTRIES \
                    and index_cache.holds(spark, tables.index):
                entries = [(r[0], int(r[1]), bool(r[2])) for r in spark.sql(
                    f"select _row_key, _ref_key, _is_deleted from {name} "
                    "where _merge_action != 'none'").collect()]
            check_held(tables.job)
            committing(spark, step_properties(MERGE_STEP, batch_id), lambda: spark.sql(
                f"insert into {tables.index} (_row_key, _ref_key, _is_deleted, _batch_id, "
                f"_indexed_at) select _row_key, _ref_key, _is_deleted, _batch_id, "
                f"current_timestamp() from {name} where _merge_action != 'none'"))
            if entries is not None:  # to the index held in memory
                index_cache.committed(spark, tables.index, batch_id, entries)
        timings["index_s"] = time.perf_counter() - timer - timings["change_set_s"]
        fault_point("merge_after_index")
        if history is not None:  # every valid change a version, committed before the lake:
            # with the columns the lake gains in this batch's upsert (the converter and the
            # lake model added them), so its versions hold their values from this batch on
            added = [(f.name, f.dataType.simpleString()) for f in changes.schema
                     if f.name not in LAKE_BOOKKEEPING and f.name.lower() not in present]
            history_writer.write_batch(spark, tables, history, batch_id, history_writer
                                       .driver_valid(spark, view, small, batch_id), view, added)
        if figures["written"]:
            carried = entries_property(computed.entries or []) if deferred else {}
            _upsert(spark, changes, name, lake, batch_id, tables.job, present, carried)
            if deferred:
                index_cache.lake_committed(tables.index, batch_id, computed.entries or [])
        timings["lake_s"] = time.perf_counter() - timer - sum(timings.values())
        spark.catalog.dropTempView(name)
    finally:
        changes.unpersist()
    counts = {"inserted": int(figures["inserted"]), "updated": int(figures["updated"]),
              "deleted": int(figures["deleted"]),
              "merge_errors": int(figures["rejected"]) if "errors" not in skip else 0,
              "skipped": skip, "seconds": {k: round(v, 3) for k, v in timings.items()},
              "partial_keys": computed.partial_keys,
              "change_set": "sql" if computed.entries is None else "driver"}
    log.info("merged batch %d into %s: %s", batch_id, lake, counts)
    return counts


def _sql_changes(spark: SparkSession, compiled: CompiledJob, view: str, batch_id: int,
                 partial_batches: set[int]) -> ChangeSet:
    """The batch's change set by the lake model's compiled SQL."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    keys, partial_keys = "NULL", 0  # no partial update: the lake is not read at all
    if batch_id in partial_batches:
        query = (f"select distinct _row_key from {view} where _batch_id = {batch_id} "
                 "and _changed_columns is not null and not coalesce(_is_deleted, false)")
        found = [r[0] for r in spark.sql(f"{query} limit {PARTIAL_KEYS_LITERAL + 1}").collect()]
        if len(found) > PARTIAL_KEYS_LITERAL:
            keys, partial_keys = query, -1
        else:
            keys, partial_keys = ", ".join(quoted(k) for k in found), len(found)
    sql = (compiled.change_set.replace(compiled.valid, view).replace(BATCH_ID, str(batch_id))
           .replace(PARTIAL_KEYS, keys))
    before = str(spark.conf.get(CONSTRAINTS, "true"))
    spark.conf.set(CONSTRAINTS, "false")  # its many aliased columns (the macro does too)
    try:
        changes = spark.sql(sql).persist(StorageLevel.MEMORY_AND_DISK)
    finally:
        spark.conf.set(CONSTRAINTS, before)
    actions = F.col("_merge_action")
    figures = changes.agg(
        F.count_if(actions == "insert").alias("inserted"),
        F.count_if(actions == "update").alias("updated"),
        F.count_if(actions == "delete").alias("deleted"),
        F.count_if(actions.isin("insert", "update", "delete")).alias("written"),
        F.count_if(actions != "none").alias("changed"),
        F.coalesce(F.sum(F.size("_rejected")), F.lit(0)).alias("rejected")).collect()[0]
    return ChangeSet(changes, figures.asDict(), partial_keys)


HUDI_META = ("_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key",
             "_hoodie_partition_path", "_hoodie_file_name")


def _settle(spark: SparkSession, tables: JobTables, newest: int) -> None:
    """The last batches changed nothing in the lake (every change older than the lake's, or
    every row failing the suite): one empty commit carries the merge checkpoint past them, so
    the next run neither forks nor counts them again (the step tables' path commits them too)."""
    lake = tables.lake
    assert lake is not None
    columns = ", ".join(f"`{c}`" for c in spark.table(lake).columns if c not in HUDI_META)
    check_held(tables.job)
    committing(spark, step_properties(MERGE_STEP, newest), lambda: spark.sql(
        f"insert into {lake} ({columns}) select {columns} from {lake} where false"))
    log.info("batches up to %d changed nothing in %s: its merge checkpoint moved past them",
             newest, lake)


def _upsert(spark: SparkSession, changes: DataFrame, name: str, lake: str, batch_id: int,
            job: str, present: set[str], carried: dict[str, str]) -> None:
    """The bucket lake's upsert of a change set (macros/materializations/
    sluice_apply_change_set.sql writes the same: deletes flagged in _hoodie_is_deleted), or
    an Iceberg lake's MERGE, its commit carrying the merge checkpoint and ``carried`` (the
    batch's index entries)."""
    columns = [(f.name, f.dataType.simpleString()) for f in changes.schema
               if f.name not in LAKE_BOOKKEEPING] + [("_merged_at", "timestamp")]
    widen_known(spark, lake, columns)  # a column whose type the batch widens (evolve.py)
    for column, kind in columns:  # on_schema_change append_new_columns, as the macro
        if column.lower() not in present:
            log.info("lake %s gains column %s %s", lake, column, kind)
            spark.sql(f"alter table {lake} add column `{column}` {kind}")
            present.add(column.lower())
    names = [f"`{c}`" for c, _ in columns]
    if not session_format(spark).bucket_lakes:  # Iceberg: the materialization's MERGE
        check_held(job)
        committing(spark, {**step_properties(MERGE_STEP, batch_id), **carried},
                   lambda: spark.sql(_merge_sql(name, lake, names)))
        fault_point("after_lake_commit")
        return
    values = [f"{DELETE_REF_KEY} as `_ref_key`" if c == "_ref_key" else f"`{c}`"
              for c, _ in columns]
    statement = (
        f"insert into {lake} ({', '.join(names)}, `_hoodie_is_deleted`) "
        f"select {', '.join(values)}, _merge_action = 'delete' as `_hoodie_is_deleted` "
        f"from (select *, current_timestamp() as _merged_at from {name} "
        "where _merge_action in ('insert', 'update', 'delete')) as batch")
    check_held(job)
    with insert_operation_kept(spark):
        spark.conf.set(INSERT_OPERATION, "upsert")
        committing(spark, {**step_properties(MERGE_STEP, batch_id), **carried},
                   lambda: spark.sql(statement))
    fault_point("after_lake_commit")



def _merge_sql(changes: str, lake: str, names: list[str]) -> str:
    """An Iceberg lake's MERGE of a change set (macros/materializations/
    sluice_apply_change_set.sql writes the same without keep_tombstones)."""
    updates = ", ".join(f"lake.{n} = batch.{n}" for n in names)
    return (
        f"merge into {lake} as lake using (select *, current_timestamp() as _merged_at "
        f"from {changes} where _merge_action in ('insert', 'update', 'delete')) as batch "
        "on lake._row_key = batch._row_key "
        "when matched and batch._merge_action = 'delete' then delete "
        f"when matched then update set {updates} "
        f"when not matched and batch._merge_action != 'delete' then insert "
        f"({', '.join(names)}) values ({', '.join(f'batch.{n}' for n in names)})")


def _rejected_sql(changes: str, errors: str, lake: str) -> str:
    """The rejected partial updates as error rows (the materialization writes the same)."""
    return (
        f"insert into {errors} (_row_key, _ref_key, _batch_id, _kafka_partition, _kafka_offset, "
        "error_step, error_exception, error_source_data, _errored_at) "
        "select _row_key, rejected._ref_key, _batch_id, rejected._kafka_partition, "
        "rejected._kafka_offset, 'merge', "
        f"'partial update of a row that does not exist in {lake}: it changes only ' || "
        "'some columns and there is no current row to take the others from', "
        f"rejected.error_source_data, current_timestamp() from {changes} "
        "lateral view explode(_rejected) exploded as rejected")
