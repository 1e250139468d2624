"""A job's error rows as one list, each with its lineage and whether a replay resolved it.

Two tables hold a job's error rows: ``errors.<job>__raw`` (messages ingest could not decode)
and ``errors.<job>`` (rows the fork's suite or the merge rejected). Both keep where the row
came from: the raw batch, the Kafka partition and offset (a file source's file and record
number). ``error_rows`` puts them side by side in these columns (what ``--where`` filters on):

=================  ===========================================================================
error_id           ``<step>:<batch_id>:<partition>:<offset>``: unique per error row
step               decode (ingest), fork (the suite), merge (a partial update of no row)
batch_id           the raw batch the row came in
partition, offset  the Kafka partition and offset of its message
row_key, ref_key   its row key (decode errors: the message key) and ref key (decode: null)
reason             why it failed (the fork: every failed expectation)
source_data        the row as JSON (fork, merge) or the message bytes as text (decode)
errored_at         when it failed
resolved_in_batch  the raw batch whose replay resolved it (null: unresolved)
=================  ===========================================================================

A replayed row is appended to ``raw.<job>`` with ``_replay_of`` set to its error row's id,
in the same commit as its batch's checkpoint: an error row is resolved exactly when raw
holds a row replaying it, so the mark and the data cannot part, whatever crashes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from python_ingest.changelog.schema import REPLAY_COLUMN
from python_ingest.tables.formats import table_exists
from python_ingest.tables.names import JobTables

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from python_ingest.tables.native import NativeLake

DECODE = "decode"  # the step of errors.<job>__raw's rows (the other table says its own)


@dataclass(frozen=True)
class ReasonCount:
    """Error rows of one step and reason: how many are waiting and how many were replayed."""

    step: str
    reason: str
    unresolved: int
    resolved: int


def error_rows(spark: SparkSession, job: str) -> DataFrame | None:
    """Every error row of ``job`` in the columns above (None: the job has no error table)."""
    from pyspark.sql import functions as F

    tables = JobTables(job)
    parts = []
    if table_exists(spark, tables.raw_errors):
        raw_errors = spark.table(tables.raw_errors)
        parts.append(raw_errors.select(
            F.lit(DECODE).alias("step"), "_batch_id", "_kafka_partition", "_kafka_offset",
            "_row_key", F.lit(None).cast("bigint").alias("_ref_key"),
            F.col("error_exception").alias("reason"),
            F.expr("cast(error_source_data as string)").alias("source_data"),
            F.col("_ingested_at").alias("errored_at")))
    if table_exists(spark, tables.errors):
        errors = spark.table(tables.errors)
        parts.append(errors.select(
            "error_step", "_batch_id", "_kafka_partition", "_kafka_offset", "_row_key",
            "_ref_key", "error_exception", "error_source_data", "_errored_at"))
    if not parts:
        return None
    rows = parts[0]
    for part in parts[1:]:
        rows = rows.union(part)
    rows = rows.toDF("step", "batch_id", "partition", "offset", "row_key", "ref_key", "reason",
                     "source_data", "errored_at")
    rows = rows.withColumn("error_id", F.concat_ws(":", "step", "batch_id", "partition",
                                                   "offset"))
    resolved = _resolved(spark, tables.raw)
    if resolved is None:
        return rows.withColumn("resolved_in_batch", F.lit(None).cast("bigint"))
    return rows.join(resolved, "error_id", "left")


def _resolved(spark: SparkSession, raw: str) -> DataFrame | None:
    """Error ids the raw table holds replays of, with the batch of the first one."""
    from pyspark.sql import functions as F

    if not table_exists(spark, raw) or REPLAY_COLUMN not in spark.table(raw).columns:
        return None
    return (spark.table(raw).where(F.col(REPLAY_COLUMN).isNotNull())
            .groupBy(F.col(REPLAY_COLUMN).alias("error_id"))
            .agg(F.min("_batch_id").alias("resolved_in_batch")))


def chosen(rows: DataFrame, reason: str | None = None, where: str | None = None,
           include_resolved: bool = False) -> DataFrame:
    """The error rows a command works on: unresolved ones (unless ``include_resolved``) whose
    reason contains ``reason`` (case-insensitive) and that match the SQL ``where``."""
    from pyspark.sql import functions as F

    if not include_resolved:
        rows = rows.where(F.col("resolved_in_batch").isNull())
    if reason:
        rows = rows.where(F.lower("reason").contains(reason.lower()))
    if where:
        rows = rows.where(F.expr(where))
    return rows


def by_reason(rows: DataFrame) -> list[ReasonCount]:
    """Counts per step and reason, the most frequent unresolved first."""
    from pyspark.sql import functions as F

    counted = rows.groupBy("step", "reason").agg(
        F.count_if(F.col("resolved_in_batch").isNull()).alias("unresolved"),
        F.count_if(F.col("resolved_in_batch").isNotNull()).alias("resolved")).collect()
    found = [ReasonCount(r["step"], r["reason"] or "", int(r["unresolved"]), int(r["resolved"]))
             for r in counted]
    return sorted(found, key=lambda c: (-c.unresolved, -c.resolved, c.step, c.reason))


def native_counts(lake: NativeLake, job: str, reason: str | None = None) -> list[ReasonCount]:
    """``by_reason(chosen(error_rows(...), reason, include_resolved=True))`` read without a
    JVM (``tables.native``; raises NativeUnavailable when the reader cannot: use Spark)."""
    tables = JobTables(job)
    found: list[tuple[str, str | None, str]] = []  # step, reason, error id of each row
    if lake.exists(tables.raw_errors):
        rows = lake.read(tables.raw_errors, ["_batch_id", "_kafka_partition", "_kafka_offset",
                                             "error_exception"]).to_pylist()
        found += [(DECODE, r["error_exception"],
                   _error_id(DECODE, r["_batch_id"], r["_kafka_partition"], r["_kafka_offset"]))
                  for r in rows]
    if lake.exists(tables.errors):
        rows = lake.read(tables.errors, ["error_step", "_batch_id", "_kafka_partition",
                                         "_kafka_offset", "error_exception"]).to_pylist()
        found += [(r["error_step"], r["error_exception"],
                   _error_id(r["error_step"], r["_batch_id"], r["_kafka_partition"],
                             r["_kafka_offset"])) for r in rows]
    if reason:
        found = [f for f in found if f[1] is not None and reason.lower() in f[1].lower()]
    resolved: set[str] = set()
    if found and lake.exists(tables.raw) and REPLAY_COLUMN in lake.column_names(tables.raw):
        replays = lake.read(tables.raw, [REPLAY_COLUMN])[REPLAY_COLUMN]
        resolved = {v for v in replays.to_pylist() if v is not None}
    counts: dict[tuple[str, str | None], list[int]] = {}
    for step, why, error_id in found:
        counts.setdefault((step, why), [0, 0])[error_id in resolved] += 1
    listed = [ReasonCount(step, why or "", waiting, done)
              for (step, why), (waiting, done) in counts.items()]
    return sorted(listed, key=lambda c: (-c.unresolved, -c.resolved, c.step, c.reason))


def _error_id(*parts: object) -> str:
    """Spark's ``concat_ws(':', ...)`` of the parts: nulls left out."""
    return ":".join(str(p) for p in parts if p is not None)
