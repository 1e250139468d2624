"""The ingestion step: Kafka work units → raw.<table> and errors.<table>__raw, exactly once.

A run plans its work units from the raw table's checkpoint, has Spark tasks read and decode
their ranges (each task talks to Kafka itself), forks the result into raw rows and error
rows, and commits each table with the new checkpoint in the same Iceberg commit. The error
table commits first; rows it already holds (a crash between the two commits) are filtered by
its own checkpoint on the rerun, so neither table gets duplicates or gaps.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from python_ingest import kafka_io
from python_ingest.changelog import RAW_ERROR_COLUMNS, ChangelogSchema
from python_ingest.config import JobConfig, Settings
from python_ingest.exceptions import ReadError, SluiceError
from python_ingest.reader import ReadSpec, output_ddl, read_units
from python_ingest.runs import Run
from python_ingest.tables import append_with_checkpoint, ensure_table, read_checkpoint
from python_ingest.workunits import Checkpoint, Plan, WorkUnit, plan, start_positions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

FAULT_ENV = "SLUICE_FAULT"


def fault_point(name: str) -> None:
    """Kill this process hard at a named point when $SLUICE_FAULT says so (crash tests)."""
    if os.environ.get(FAULT_ENV) == name:
        log.warning("fault injection: killing the process at '%s'", name)
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass(frozen=True)
class IngestResult:
    """What one ingestion run did."""

    batch_id: int | None
    read: int
    landed: int
    errors: int
    bytes: int
    plan: Plan
    checkpoint: Checkpoint | None

    @property
    def up_to_date(self) -> bool:
        return self.batch_id is None


class _Progress:
    """Logs read progress (tasks done of all) while a long Spark job runs."""

    def __init__(self, spark: SparkSession, total_units: int, interval_s: float = 5.0) -> None:
        self.tracker = spark.sparkContext.statusTracker()
        self.total = total_units
        self.interval = interval_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> _Progress:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()

    def _loop(self) -> None:
        started = time.monotonic()
        while not self.stop.wait(self.interval):
            for stage_id in self.tracker.getActiveStageIds():
                info = self.tracker.getStageInfo(stage_id)
                if info and info.numTasks:
                    log.info("reading: %d/%d tasks done (%d running), %.0fs",
                             info.numCompletedTasks, info.numTasks, info.numActiveTasks,
                             time.monotonic() - started)


def _spark_error(exc: Exception) -> SluiceError:
    """Turn a failed Spark job into the sluice error raised inside the task, if any."""
    text = "\n".join(str(part) for part in (exc, getattr(exc, "desc", ""),
                                            getattr(exc, "java_exception", "")) if part)
    for marker in ("ReadError: ", "BrokerError: "):
        if marker in text:
            return ReadError(text.split(marker, 1)[1].splitlines()[0])
    lines = [line for line in text.splitlines() if "Error" in line or "Exception" in line]
    return ReadError(f"reading from Kafka failed: {lines[-1].strip() if lines else exc!r}")


def plan_run(settings: Settings, job: JobConfig, checkpoint: Checkpoint | None,
             accept_data_loss: bool = False) -> Plan:
    """Work units for the next run of ``job`` from ``checkpoint`` and the broker's offsets."""
    bootstrap = settings.broker.bootstrap_servers
    offsets = kafka_io.partition_offsets(bootstrap, job.topic)
    positions, losses = start_positions(job.topic, offsets, checkpoint, job.starting_offsets,
                                        accept_data_loss or job.on_data_loss == "accept")
    bytes_per_message = checkpoint.bytes_per_message if checkpoint else None
    ends = {po.partition: po.end for po in offsets}
    if bytes_per_message is None and job.max_bytes < JobConfig.max_bytes:
        pending = {p: s for p, s in positions.items() if s < ends[p]}
        bytes_per_message = kafka_io.sample_message_bytes(bootstrap, job.topic, pending)
    return plan(job.topic, offsets, positions, job.max_records, job.max_bytes,
                bytes_per_message, job.records_per_task, losses)


def ingest(spark: SparkSession, settings: Settings, job: JobConfig, run: Run,
           accept_data_loss: bool = False) -> IngestResult:
    """Run one ingestion of ``job``; fills ``run`` with counts and returns what it did."""
    schema = ChangelogSchema.load(job, settings.root)
    ensure_table(spark, job.raw_table, schema.raw_columns())
    ensure_table(spark, job.raw_error_table, RAW_ERROR_COLUMNS)
    checkpoint = read_checkpoint(spark, job.raw_table)
    error_checkpoint = read_checkpoint(spark, job.raw_error_table)
    work = plan_run(settings, job, checkpoint, accept_data_loss)
    run.details["work_units"] = [u.__dict__ for u in work.units]
    run.details["checkpoint_from"] = dict(work.start)
    if work.data_loss:
        run.details["data_loss"] = [loss.__dict__ for loss in work.data_loss]
        run.count("lost", sum(loss.end - loss.start for loss in work.data_loss))
        log.warning("accepted data loss on %s: %s", job.topic, work.data_loss)
    if not work.units and not work.data_loss:
        log.info("job %s: up to date (no new messages on %s)", job.name, job.topic)
        for name in ("read", "landed", "decode_errors", "bytes"):
            run.count(name, 0)
        return IngestResult(None, 0, 0, 0, 0, work, checkpoint)

    batch_id = (checkpoint.batch_id if checkpoint else 0) + 1
    run.batch_id = batch_id
    log.info("job %s batch %d: reading %d messages in %d work units (%d left for later runs)",
             job.name, batch_id, work.planned, len(work.units), work.remaining)
    spec = ReadSpec(job.reader, settings.broker.bootstrap_servers, job.read_timeout_s, schema,
                    batch_id, int(datetime.now(UTC).timestamp() * 1_000_000))
    combined = _read(spark, spec, work.units)
    try:
        timer = time.monotonic()
        read, errors, size = _counts(spark, combined, len(work.units))
        log.info("job %s batch %d: read and decoded %d messages (%d bytes) in %.1fs", job.name,
                 batch_id, read, size, time.monotonic() - timer)
        fault_point("after_read")
        landed = read - errors
        new_checkpoint = Checkpoint(job.topic, work.next_offsets, batch_id,
                                    (size / read) if read else
                                    (checkpoint.bytes_per_message if checkpoint else None))
        error_rows = _already_committed(combined.where("error_exception is not null"),
                                        error_checkpoint, work)
        if errors:
            append_with_checkpoint(error_rows.select(*[n for n, _ in RAW_ERROR_COLUMNS]),
                                   job.raw_error_table, new_checkpoint)
        fault_point("before_raw_commit")
        timer = time.monotonic()
        raw_columns = [n for n, _ in schema.raw_columns()]
        append_with_checkpoint(combined.where("error_exception is null").select(*raw_columns),
                               job.raw_table, new_checkpoint)
        log.info("job %s batch %d: committed %s with checkpoint %s in %.1fs", job.name, batch_id,
                 job.raw_table, dict(new_checkpoint.offsets), time.monotonic() - timer)
        fault_point("after_raw_commit")
    finally:
        combined.unpersist()
    run.count("read", read)
    run.count("landed", landed)
    run.count("decode_errors", errors)
    run.count("bytes", size)
    run.details["checkpoint_to"] = dict(new_checkpoint.offsets)
    log.info("job %s batch %d: read %d, landed %d in %s, %d errors in %s", job.name, batch_id,
             read, landed, job.raw_table, errors, job.raw_error_table)
    return IngestResult(batch_id, read, landed, errors, size, work, new_checkpoint)


def _read(spark: SparkSession, spec: ReadSpec, units: tuple[WorkUnit, ...]) -> DataFrame:
    from pyspark import StorageLevel

    rows = [(u.topic, u.partition, u.start, u.end) for u in units]
    ddl = output_ddl(spec.schema)
    tasks = spark.sparkContext.parallelize(rows, len(rows)).toDF(
        "topic string, partition int, start bigint, end bigint")
    combined = tasks.mapInArrow(lambda batches: read_units(spec, batches), ddl)
    return combined.persist(StorageLevel.MEMORY_AND_DISK)


def _counts(spark: SparkSession, combined: DataFrame, units: int) -> tuple[int, int, int]:
    """Read everything (one Spark job) and count messages, error rows and bytes."""
    from pyspark.sql import functions as F

    with _Progress(spark, units):
        try:
            row = combined.agg(
                F.count(F.lit(1)).alias("read"),
                F.count("error_exception").alias("errors"),
                F.coalesce(F.sum("_message_bytes"), F.lit(0)).alias("bytes"),
            ).collect()[0]
        except Exception as exc:  # Py4JJavaError / PythonException from a task
            raise _spark_error(exc) from exc
    return int(row["read"]), int(row["errors"]), int(row["bytes"])


def _already_committed(errors: DataFrame, error_checkpoint: Checkpoint | None,
                       work: Plan) -> DataFrame:
    """Drop error rows the error table already holds (committed before a crash)."""
    if error_checkpoint is None:
        return errors
    ahead = {p: o for p, o in error_checkpoint.offsets.items()
             if p in work.start and o > work.start[p]}
    for partition, offset in ahead.items():
        log.info("error table already holds partition %d up to offset %d: skipping those rows",
                 partition, offset)
        errors = errors.where(f"not (_kafka_partition = {partition} and _kafka_offset < {offset})")
    return errors
