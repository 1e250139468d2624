"""The direct bootstrap's lake side (issue #62): landed raw batches to the lake as all inserts.

A direct bootstrap lands a table's snapshot chunks as raw batches ``first..last`` of its job
(steps/bootstrap.py), after a first, small batch that took the normal road and so created the
job's tables (staging, valid, errors, lake, index) as any first batch does. ``finish`` then
takes those batches to the lake in bulk, each step committing its checkpoint so a kill at any
point is finished by running it again:

    errors.<job>       the fork's error rows (the job's converter and suite, the batch path's
                       one pass)                                 sluice.fork.batch_id = last
    staging, valid     only for a job on the step tables' path (Iceberg, keep_step_tables,
                       record-index lakes), so its next run does not stage these batches again
    meta.<job>__index  one entry per valid row, sorted by row key, appended in one commit
                                                                 sluice.merge.batch_id = last
    lake.<model>       the valid rows as the lake's columns, in one commit: Hudi bulk_insert
                       (insert into the bucket file groups of a lake its first batch wrote),
                       Iceberg append; no change set, no index look-up
                                                                 sluice.merge.batch_id = last

Every bootstrap row is an insert: the chunks split the key space, a key is in one chunk, and
the lake held none of them. The index goes before the lake, as in the SQL merge (index.py): a
run of the job between the two sees the index ahead and merges the batches by the lake
model's SQL (same result). Changes the tap published meanwhile reach the lake later through
the stream, by ref key: a change older than its chunk's snapshot is ignored.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from python_ingest.config.table_formats import session_format
from python_ingest.runtime.catalog import insert_operation_kept
from python_ingest.runtime.faults import fault_point
from python_ingest.steps.batch import HUDI_META, INSERT_OPERATION, why_not
from python_ingest.steps.compiled import BATCH_FROM, BATCH_TO, compile_job
from python_ingest.steps.fork.split import ERROR_COLUMNS, STEP, split
from python_ingest.steps.merge import index_cache
from python_ingest.steps.merge.index import MERGE_STEP
from python_ingest.tables.checkpoints import step_checkpoint, step_properties
from python_ingest.tables.formats import append, committing, ensure_table, table_exists
from python_ingest.tables.lease import check_held

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from python_ingest.config import JobConfig
    from python_ingest.steps.dbt import Dbt
    from python_ingest.tables.names import JobTables

log = logging.getLogger(__name__)

DONE_PROPERTY = "sluice.bootstrap.done"  # on the lake commit: the plan it finished
COMBINE = "hoodie.combine.before.insert"  # Hudi: rows of one key combined before an insert


def lake_holds_rows(spark: SparkSession, tables: JobTables) -> bool:
    return tables.lake is not None and table_exists(spark, tables.lake) \
        and spark.table(tables.lake).limit(1).count() > 0


def finish(spark: SparkSession, dbt: Dbt, job: JobConfig, tables: JobTables, suite: Path,
           report_dir: Path | None, first: int, last: int, plan_id: str,
           unique_keys: bool = False) -> dict[str, int]:
    """Raw batches ``first..last`` converted, forked and written to the lake in bulk; counts
    (rows, valid, errors). Steps a run before committed are not written again.
    ``unique_keys``: the rows' keys are the table's primary or unique key, one row each (the
    converter passes ``_row_key`` through): the lake's write skips Hudi's combining."""
    from pyspark.sql import functions as F

    lake = tables.lake
    assert lake is not None
    if step_checkpoint(spark, lake, MERGE_STEP) >= last:
        return {"rows": 0, "valid": 0, "errors": 0}
    compiled = compile_job(spark, dbt, tables, dbt.batch_sql)
    sql = compiled.converter.replace(BATCH_FROM, str(first)).replace(BATCH_TO, str(last))
    converted = spark.sql(sql)
    ensure_table(spark, tables.errors, ERROR_COLUMNS)
    parts = split(spark, converted, suite, report_dir, f"bootstrap-{first}-{last}",
                  tables.staging, tables.valid, tables.errors, persist=False)
    try:
        check_held(job.name)
        parts.commit_errors(spark, tables.errors, last)
        fault_point("bootstrap_after_errors")
        if why_not(spark, job, tables, dbt) is not None:
            _step_tables(spark, tables, converted, parts.valid, last)
        valid = parts.valid
        # entries an earlier batch left in its lake commit only (steps/merge/index.py) go to
        # the index table first: the bulk commit's checkpoint passes their batches
        index_cache.complete(spark, tables)
        if step_checkpoint(spark, tables.index, MERGE_STEP) < last:
            entries = valid.select(
                "_row_key", "_ref_key", F.lit(False).alias("_is_deleted"),
                F.col("_batch_id").cast("bigint").alias("_batch_id"),
                F.current_timestamp().alias("_indexed_at")).orderBy("_row_key")
            check_held(job.name)
            append(entries, tables.index, step_properties(MERGE_STEP, last))
        fault_point("bootstrap_after_index")
        _write_lake(spark, valid, lake, job.name, {**step_properties(MERGE_STEP, last),
                                                   DONE_PROPERTY: plan_id}, unique_keys)
        counts = {"rows": parts.rows, "valid": parts.rows - parts.error_count,
                  "errors": parts.error_count}
    finally:
        parts.release()
    log.info("bootstrap of job %s: raw batches %d..%d to %s in bulk: %s", job.name, first,
             last, lake, counts)
    return counts


def _step_tables(spark: SparkSession, tables: JobTables, converted: DataFrame,
                 valid: DataFrame, last: int) -> None:
    """The staging and valid tables of a job on the step tables' path take the batches too:
    their checkpoints (staging: its highest batch; valid: the fork's) must pass them."""
    from pyspark.sql import functions as F

    staged = spark.table(tables.staging).agg(F.max("_batch_id")).collect()[0][0]
    if staged is None or int(staged) < last:
        append(converted.select(*spark.table(tables.staging).columns), tables.staging)
    if step_checkpoint(spark, tables.valid, STEP) < last:
        append(valid.select(*spark.table(tables.valid).columns), tables.valid,
               step_properties(STEP, last))


def _write_lake(spark: SparkSession, valid: DataFrame, lake: str, job: str,
                properties: dict[str, str], unique_keys: bool = False) -> None:
    """The valid rows as the lake's columns, inserted in one commit (Hudi bulk_insert,
    Iceberg append). Hudi combines the rows of one key before an insert (a shuffle by key,
    about a third of the write: bench/bootstrap_bench.py); with ``unique_keys`` there is
    nothing to combine and it does not."""
    from pyspark.sql import functions as F

    present = {c.lower() for c in valid.columns}
    columns = []
    for field in spark.table(lake).schema.fields:
        name = field.name
        if name in HUDI_META:
            continue
        if name == "_merged_at":
            value = F.current_timestamp()
        elif name == "_hoodie_is_deleted":
            value = F.lit(False)
        elif name.lower() in present:
            value = F.col(f"`{name}`")
        else:
            value = F.lit(None)
        columns.append(value.cast(field.dataType).alias(name))
    rows = valid.select(*columns)
    view = f"sluice_bootstrap__{job}"
    rows.createOrReplaceTempView(view)
    names = ", ".join(f"`{f.name}`" for f in rows.schema.fields)
    # Hudi: bulk_insert writes new file groups, so only into a lake without any; a lake its
    # first batch wrote has a file group per bucket it touched, into which insert appends
    operation = "insert" if spark.table(lake).limit(1).count() else "bulk_insert"
    check_held(job)
    with insert_operation_kept(spark, COMBINE):
        if session_format(spark).bucket_lakes:  # Hudi: its insert's operation by setting
            spark.conf.set(INSERT_OPERATION, operation)
            if unique_keys:
                spark.conf.set(COMBINE, "false")
        committing(spark, properties, lambda: spark.sql(
            f"insert into {lake} ({names}) select {names} from {view}"))
    spark.catalog.dropTempView(view)
    fault_point("bootstrap_after_lake")
