"""``sluice errors replay``: chosen error rows back through staging, fork and merge.

A replay is one recorded run of the job under its lease whose first step lands the chosen
rows in ``raw.<job>`` as a new batch, instead of ingesting; staging, the fork and the merge
then run as for any batch (``steps.pipeline.run_job``):

- rows the fork or the merge rejected: their raw rows again (found by batch, partition and
  offset), so a fixed converter or suite judges them anew;
- messages ingest could not decode: their bytes, kept in ``errors.<job>__raw``, decoded again
  with the job's schema as it is now (those still failing stay unresolved and are counted);
- ``--set 'column = SQL'`` rewrites payload columns of the replayed raw rows first (a fix of
  the row itself).

Every replayed row carries ``_replay_of`` (its error row's id) in the raw commit that also
carries the batch's checkpoint, which is what marks the error row resolved
(``replay.selection``): a replay that dies before that commit resolved nothing and can run
again; after it, the later steps catch up as after any crash. Replaying twice replays
nothing the second time. Replayed rows keep their ref keys, so the merge's order guard lets
no replayed row overwrite a newer version or bring back a deleted row.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from python_ingest.changelog.schema import ChangelogSchema
from python_ingest.config import JobConfig, Settings
from python_ingest.exceptions import ReplayError
from python_ingest.kafka.client import MessageBatch
from python_ingest.replay.selection import DECODE, REPLAY_COLUMN, chosen, error_rows
from python_ingest.runtime.faults import fault_point
from python_ingest.sources.kafka.reader import ReadSpec, decode_messages
from python_ingest.tables.checkpoints import Checkpoint, append_with_checkpoint, read_checkpoint
from python_ingest.tables.formats import ensure_table, read_table, table_format
from python_ingest.tables.lease import check_held
from python_ingest.tables.names import JobTables
from python_ingest.tables.runs import Run

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from python_ingest.steps.dbt import Dbt
    from python_ingest.steps.pipeline import PipelineResult

log = logging.getLogger(__name__)
STEP = "replay"
_SET = re.compile(r"^\s*`?(?P<column>[A-Za-z_][A-Za-z0-9_]*)`?\s*=\s*(?P<expr>.+)$", re.S)


@dataclass(frozen=True)
class Selection:
    """What a replay is asked to take: unresolved error rows matching these."""

    reason: str | None = None
    where: str | None = None
    sets: tuple[str, ...] = ()  # 'column = SQL expression' fixes of the raw rows


@dataclass
class ReplayResult:
    """What a replay did (``run`` is None for a dry run or when nothing matched)."""

    selected: int
    replayed: int = 0
    still_failing: int = 0
    run: PipelineResult | None = None


def parse_sets(sets: Sequence[str], schema: ChangelogSchema) -> dict[str, str]:
    """``column = expression`` pairs; only payload columns other than the row key may be set
    (the row key names the row; sluice's ``_`` columns are its lineage)."""
    payload = {name: kind for name, kind in schema.payload}
    parsed: dict[str, str] = {}
    for text in sets:
        match = _SET.match(text)
        if not match:
            raise ReplayError(f"--set '{text}' is not 'column = SQL expression'")
        column = match["column"]
        if column not in payload or column.startswith("_"):
            raise ReplayError(f"--set '{text}': '{column}' is not a column of the job's rows "
                              f"(columns: {', '.join(c for c in payload if c[0] != '_')})")
        if column in schema.row_key:
            raise ReplayError(f"--set '{text}': '{column}' is part of the row key; a replay "
                              "fixes rows, it does not move them to another key")
        parsed[column] = match["expr"].strip()
    return parsed


def replay(spark: SparkSession, settings: Settings, job: JobConfig, selection: Selection,
           dry_run: bool = False, dbt: Dbt | None = None) -> ReplayResult:
    """Replay the chosen error rows of ``job`` (``dry_run``: only count them), on the
    session writing the job's table format."""
    from python_ingest.runtime.session import active, for_job

    with active(for_job(spark, settings, job)) as session:
        return _replay(session, settings, job, selection, dry_run, dbt)


def _replay(spark: SparkSession, settings: Settings, job: JobConfig, selection: Selection,
            dry_run: bool, dbt: Dbt | None) -> ReplayResult:
    from python_ingest.steps.pipeline import run_job

    schema = ChangelogSchema.of(settings, job)
    fixes = parse_sets(selection.sets, schema)  # a bad --set fails before anything moves
    rows = error_rows(spark, job.name)
    if rows is None:
        return ReplayResult(0)
    selected = chosen(rows, selection.reason, selection.where).count()
    if dry_run or selected == 0:
        return ReplayResult(selected)
    result = ReplayResult(selected)

    def land(run: Run) -> Checkpoint | None:
        return _land(spark, settings, job, schema, selection, fixes, run, result)

    result.run = run_job(spark, settings, job, dbt=dbt, land=(STEP, land))
    return result


def _land(spark: SparkSession, settings: Settings, job: JobConfig, schema: ChangelogSchema,
          selection: Selection, fixes: dict[str, str], run: Run,
          result: ReplayResult) -> Checkpoint:
    """Append the chosen rows to raw as the next batch, with the raw checkpoint moved on by
    one batch (same source positions); chosen again under the lease."""
    tables = JobTables(job.name)
    checkpoint = read_checkpoint(spark, tables.raw)
    if checkpoint is None:
        raise ReplayError(f"{tables.raw} has no checkpoint: job '{job.name}' has landed "
                          "nothing, so there is nothing to replay")
    ensure_table(spark, tables.raw, schema.raw_columns())  # older raw tables lack _replay_of
    rows = error_rows(spark, job.name)
    assert rows is not None
    picked = chosen(rows, selection.reason, selection.where).select(
        "error_id", "step", "batch_id", "partition", "offset").persist()
    batch_id = checkpoint.batch_id + 1
    ingested_at = datetime.now(UTC)
    columns = table_format(spark).payload_columns(spark, tables.raw)
    again = _from_raw(spark, tables.raw, picked)
    decoded, failing = _decoded(spark, settings, job, schema, tables, picked, batch_id,
                                ingested_at)
    # (a raw table keeps columns a later schema dropped: null for decoded rows)
    frame = again.unionByName(decoded, allowMissingColumns=True) if decoded is not None \
        else again
    frame = _fixed(frame, fixes, dict(schema.payload))
    frame = frame.withColumn("_batch_id", _lit(batch_id, "bigint")).withColumn(
        "_ingested_at", _lit(ingested_at, "timestamp")).select(*columns).persist()
    try:
        replayed = frame.count()
        if replayed == 0:
            raise ReplayError(f"none of the {picked.count()} chosen error rows could be "
                              f"replayed: {failing} still fail to decode")
        # same source positions, and an empty batch range: nothing for ingest's error catch-up
        # to re-read should the error table's commit below not happen
        moved = replace(checkpoint, batch_id=batch_id, batch_start=dict(checkpoint.offsets),
                        files=replace(checkpoint.files, batch=()) if checkpoint.files else None)
        fault_point("before_replay_commit")
        check_held(job.name)
        append_with_checkpoint(frame, tables.raw, moved)
        fault_point("after_replay_commit")
        # the raw error table follows the raw checkpoint (ingest checks they agree); an empty
        # commit, as after a batch without decode errors
        append_with_checkpoint(read_table(spark, tables.raw_errors).limit(0), tables.raw_errors,
                               moved)
    finally:
        frame.unpersist()
        picked.unpersist()
    result.replayed, result.still_failing = replayed, failing
    run.batch_id = batch_id
    run.count("replayed", replayed)
    run.count("landed", replayed)
    run.count("still_failing", failing)
    run.details["replay"] = {"reason": selection.reason, "where": selection.where,
                             "set": fixes, "batch_id": batch_id}
    log.info("job %s: replayed %d error rows as raw batch %d (%d still fail to decode)",
             job.name, replayed, batch_id, failing)
    return moved


def _lit(value: Any, kind: str) -> Any:
    from pyspark.sql import functions as F

    return F.lit(value).cast(kind)


def _from_raw(spark: SparkSession, raw: str, picked: DataFrame) -> DataFrame:
    """The raw rows behind the chosen fork and merge error rows, marked with their ids."""
    from pyspark.sql import functions as F

    keys = picked.where(F.col("step") != DECODE).select(
        "error_id", F.col("batch_id").alias("k_batch"), F.col("partition").alias("k_part"),
        F.col("offset").alias("k_offset"))
    rows = read_table(spark, raw).alias("raw")
    joined = rows.join(keys, (F.col("raw._batch_id") == F.col("k_batch"))
                       & (F.col("raw._kafka_partition") == F.col("k_part"))
                       & (F.col("raw._kafka_offset") == F.col("k_offset")))
    return (joined.dropDuplicates(["error_id"]).drop(REPLAY_COLUMN)
            .withColumnRenamed("error_id", REPLAY_COLUMN)
            .drop("k_batch", "k_part", "k_offset"))


def _decoded(spark: SparkSession, settings: Settings, job: JobConfig, schema: ChangelogSchema,
             tables: JobTables, picked: DataFrame, batch_id: int, ingested_at: datetime
             ) -> tuple[DataFrame | None, int]:
    """The chosen decode errors' messages decoded with the job's schema as it is now (on
    the driver: error rows are few): their raw rows, and how many still fail."""
    from pyspark.sql import functions as F

    ids = picked.where(F.col("step") == DECODE).select("error_id")
    errors = read_table(spark, tables.raw_errors).withColumn("error_id", F.concat_ws(
        ":", F.lit(DECODE), "_batch_id", "_kafka_partition", "_kafka_offset"))
    messages = errors.join(ids, "error_id").dropDuplicates(["error_id"]).orderBy(
        "_kafka_partition", "_kafka_offset").collect()
    if not messages:
        return None, 0
    spec = ReadSpec(job.reader, settings.kafka_for(job), job.read_timeout_s, schema,
                    batch_id, int(ingested_at.timestamp() * 1_000_000))
    rows: list[dict[str, Any]] = []
    failing = 0
    for partition in sorted({m["_kafka_partition"] for m in messages}):
        own = [m for m in messages if m["_kafka_partition"] == partition]
        batch = MessageBatch([m["_kafka_key"] for m in own],
                             [m["error_source_data"] for m in own],
                             [m["_kafka_offset"] for m in own],
                             [int(m["_kafka_timestamp"].replace(tzinfo=UTC).timestamp() * 1000)
                              if m["_kafka_timestamp"] else 0 for m in own])
        raw, still = decode_messages(spec, partition, batch)
        failing += len(still)
        by_offset = {m["_kafka_offset"]: m["error_id"] for m in own}
        for row in raw.to_pylist() if raw is not None else []:
            row[REPLAY_COLUMN] = by_offset[row["_kafka_offset"]]
            rows.append(row)
    ddl = ", ".join(f"`{n}` {t}" for n, t in schema.raw_columns())
    names = [n for n, _ in schema.raw_columns()]
    frame = spark.createDataFrame([tuple(r[n] for n in names) for r in rows], ddl)
    return frame, failing


def _fixed(frame: DataFrame, fixes: dict[str, str], types: dict[str, str]) -> DataFrame:
    """The owner's ``--set`` fixes applied, each cast to its column's type."""
    from pyspark.sql import functions as F

    for column, expression in fixes.items():
        frame = frame.withColumn(column, F.expr(expression).cast(types[column]))
    return frame
