"""The ingestion step: Kafka work units → raw.<table> and errors.<table>__raw, exactly once.

A run plans its work units from the raw table's checkpoint and reads them in one pass: Spark
tasks read and decode their ranges (each task talks to Kafka itself) and the raw rows go
straight into the raw table, whose commit carries the new checkpoint. Error rows come back to
the driver with the tasks' counts and go into the error table in a second commit carrying the
same checkpoint. A batch without error rows makes no empty commit: a small file
(``<warehouse>/meta/.sluice_settled/<job>.json``, written whole or not at all) says that its
errors are settled, with the checkpoint the error commit would have carried. If the process
dies between the raw commit and either, the error table (or the file) is a batch behind the raw
table's checkpoint, and the next run first re-reads that batch's range (the raw checkpoint
records where the batch began) for its error rows. So neither table gets duplicates or gaps.

A JSON Debezium job whose read stops at a message adding or widening a column follows it:
its ``.avsc`` is widened (sources/debezium/follow.py), the raw table too, and the batch is read
again; nothing of the stopped read was committed.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from python_ingest.changelog.debezium import UNCHECKED
from python_ingest.changelog.schema import JOINED, RAW_ERROR_COLUMNS, ChangelogSchema
from python_ingest.config import JobConfig, Settings
from python_ingest.exceptions import (
    DataLossError,
    OffsetResetError,
    ReadError,
    RowKeyEncodingError,
    SluiceError,
    TopicRecreatedError,
)
from python_ingest.kafka import client as kafka_client
from python_ingest.runtime.faults import fault_point
from python_ingest.sources.debezium import read_bounds
from python_ingest.sources.debezium.follow import MAX_FOLLOWS, follow
from python_ingest.sources.kafka.reader import (
    ERROR_BUDGET_BYTES,
    ReadSpec,
    TaskReport,
    TaskReportParam,
    read_units,
)
from python_ingest.sources.kafka.workunits import Plan, WorkUnit, plan, start_positions
from python_ingest.steps.ingest.outcome import IngestResult
from python_ingest.tables.checkpoints import Checkpoint, append_with_checkpoint, read_checkpoint
from python_ingest.tables.formats import ensure_table, read_table
from python_ingest.tables.lease import check_held
from python_ingest.tables.names import JobTables
from python_ingest.tables.runs import Run

if TYPE_CHECKING:
    from pyspark import Accumulator
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

# Error-row bytes the tasks of a run may send back to the driver, together: each work unit may
# send its share; a unit with more is re-read by tasks that write its error rows themselves.
error_budget_bytes = ERROR_BUDGET_BYTES


class _Progress:
    """Shows read progress (tasks done of all, rate, ETA) while a long Spark job runs: a bar
    redrawn in place on a terminal, a log line every ``interval_s`` otherwise."""

    def __init__(self, spark: SparkSession, interval_s: float = 5.0,
                 stream: Any = None) -> None:
        import sys

        self.tracker = spark.sparkContext.statusTracker()
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval = 0.5 if self.tty else interval_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.drawn = False

    def __enter__(self) -> _Progress:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=2)
        if self.drawn:  # leave the last bar on its own line
            self.stream.write("\n")
            self.stream.flush()

    @staticmethod
    def line(done: int, total: int, running: int, elapsed: float, width: int = 30) -> str:
        """``[#####-----] 12/40 tasks (2 running), 0.8 tasks/s, ETA 35s, 15s``."""
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = f"{(total - done) / rate:.0f}s" if rate > 0 else "?"
        filled = int(width * done / total) if total else 0
        return (f"[{'#' * filled}{'-' * (width - filled)}] {done}/{total} tasks ({running} "
                f"running), {rate:.2f} tasks/s, ETA {eta}, {elapsed:.0f}s")

    def _loop(self) -> None:
        started = time.monotonic()
        while not self.stop.wait(self.interval):
            stages = [info for stage_id in self.tracker.getActiveStageIds()
                      if (info := self.tracker.getStageInfo(stage_id)) and info.numTasks]
            if not stages:
                continue
            text = self.line(sum(i.numCompletedTasks for i in stages),
                             sum(i.numTasks for i in stages),
                             sum(i.numActiveTasks for i in stages), time.monotonic() - started)
            if self.tty:
                self.stream.write(f"\rreading and landing {text}\x1b[K")
                self.stream.flush()
                self.drawn = True
            else:
                log.info("reading and landing: %s", text)


# The errors a read task raises, recognised in the Spark failure's text (tasks run elsewhere).
_GONE = re.compile(r"data loss on topic '(?P<topic>[^']+)' partition (?P<partition>\d+): the "
                   r"(?:checkpoint|read position) is at offset (?P<position>\d+) but the "
                   r"broker's earliest retained offset is (?P<earliest>\d+)")
_RESET = re.compile(r"topic '(?P<topic>[^']+)' partition (?P<partition>\d+): the (?:checkpoint|"
                    r"read position) is at offset (?P<position>\d+) but the partition ends at "
                    r"(?P<end>\d+)")


def _causes(java_exception: Any, limit: int = 10) -> list[str]:
    """The JVM exception and its causes, outermost first: a table format's writer (Hudi:
    "Failed to write to Hudi") wraps the failed task's error, which names what went wrong."""
    found: list[str] = []
    while java_exception is not None and len(found) < limit:
        found.append(str(java_exception.toString()))
        java_exception = java_exception.getCause()
    return found


def _spark_error(exc: Exception) -> SluiceError:
    """Turn a failed Spark job into the sluice error raised inside the task, if any."""
    text = "\n".join(str(part) for part in (exc, getattr(exc, "desc", ""),
                                            *_causes(getattr(exc, "java_exception", None)))
                     if part)
    lost = _GONE.search(text)
    if lost:
        return DataLossError(lost["topic"], int(lost["partition"]), int(lost["position"]),
                             int(lost["earliest"]))
    reset = _RESET.search(text)
    if reset:
        return OffsetResetError(reset["topic"], int(reset["partition"]),
                                int(reset["position"]), int(reset["end"]))
    for marker in ("ReadError: ", "BrokerError: "):
        if marker in text:
            return ReadError(text.split(marker, 1)[1].splitlines()[0])
    lines = [line for line in text.splitlines() if "Error" in line or "Exception" in line]
    return ReadError(f"reading from Kafka failed: {lines[-1].strip() if lines else exc!r}")


def plan_run(settings: Settings, job: JobConfig, checkpoint: Checkpoint | None,
             accept_data_loss: bool = False) -> Plan:
    """Work units for the next run of ``job`` from ``checkpoint`` and the broker's offsets."""
    bootstrap = settings.kafka_for(job)  # its own broker:, else the project's
    offsets = kafka_client.partition_offsets(bootstrap, job.topic)
    current_id = kafka_client.topic_id(bootstrap, job.topic)
    if checkpoint and checkpoint.topic_id and current_id and checkpoint.topic_id != current_id:
        raise TopicRecreatedError(job.topic, checkpoint.topic_id, current_id)
    positions, losses = start_positions(job.topic, offsets, checkpoint, job.starting_offsets,
                                        accept_data_loss or job.on_data_loss == "accept")
    bytes_per_message = checkpoint.bytes_per_message if checkpoint else None
    ends = {po.partition: po.end for po in offsets}
    if bytes_per_message is None and job.max_bytes < JobConfig.max_bytes:
        pending = {p: s for p, s in positions.items() if s < ends[p]}
        bytes_per_message = kafka_client.sample_message_bytes(bootstrap, job.topic, pending,
                                                                 ends)
    work = plan(job.topic, offsets, positions, job.max_records, job.max_bytes,
                bytes_per_message, job.records_per_task, losses)
    return replace(work, topic_id=current_id)


def ingest(spark: SparkSession, settings: Settings, job: JobConfig, run: Run,
           accept_data_loss: bool = False) -> IngestResult:
    """Run one ingestion of ``job``; fills ``run`` with counts and returns what it did."""
    if job.source == "files":  # partitions of a landing dir (docs/files-source.md)
        from python_ingest.steps.ingest.files import files_ingest

        return files_ingest(spark, settings, job, run)
    schema = ChangelogSchema.of(settings, job)
    tables = JobTables(job.name)
    ensure_table(spark, tables.raw, schema.raw_columns())
    ensure_table(spark, tables.raw_errors, RAW_ERROR_COLUMNS)
    checkpoint = read_checkpoint(spark, tables.raw)
    _check_row_key_encoding(spark, job, schema, checkpoint)
    error_checkpoint = _catch_up_errors(spark, settings, job, schema, checkpoint, run)
    if checkpoint is not None and error_checkpoint is not None:
        # the error commit carries the bytes per message the raw commit could not know yet
        checkpoint = replace(checkpoint, bytes_per_message=error_checkpoint.bytes_per_message)
    work = plan_run(settings, job, checkpoint, accept_data_loss)
    run.details["work_units"] = [u.__dict__ for u in work.units]
    run.details["checkpoint_from"] = dict(work.start)
    if work.data_loss:
        run.details["data_loss"] = [loss.__dict__ for loss in work.data_loss]
        run.count("lost", sum(loss.end - loss.start for loss in work.data_loss))
        log.warning("accepted data loss on %s: %s", job.topic, work.data_loss)
    if not work.units and not work.data_loss:
        if checkpoint is None and job.starting_offsets == "latest":
            checkpoint = _pin_start(spark, job, work)
            run.details["pinned_start"] = dict(checkpoint.offsets)
        log.info("job %s: up to date (no new messages on %s)", job.name, job.topic)
        for name in ("read", "landed", "decode_errors", "bytes"):
            run.count(name, 0)
        return IngestResult(None, 0, 0, 0, 0, work, checkpoint)

    batch_id = (checkpoint.batch_id if checkpoint else 0) + 1
    run.batch_id = batch_id
    log.info("job %s batch %d: reading %d messages in %d work units (%d left for later runs)",
             job.name, batch_id, work.planned, len(work.units), work.remaining)
    accept_loss = accept_data_loss or job.on_data_loss == "accept"
    spec = ReadSpec(job.reader, settings.kafka_for(job), job.read_timeout_s, schema,
                    batch_id, int(datetime.now(UTC).timestamp() * 1_000_000),
                    error_budget_bytes=error_budget_bytes // max(len(work.units), 1),
                    accept_loss=accept_loss, batch_start=dict(work.start),
                    read_bounds=read_bounds.known(job.name, checkpoint))
    report = spark.sparkContext.accumulator(TaskReport(), TaskReportParam())
    timer = time.monotonic()
    new_checkpoint = Checkpoint(job.topic, work.next_offsets, batch_id,
                                checkpoint.bytes_per_message if checkpoint else None, work.start,
                                work.topic_id, schema.row_key_encoding)
    fault_point("before_raw_commit")
    check_held(job.name)
    follows = 0
    while True:
        try:
            _commit_raw(spark, _read(spark, spec, work.units, report), job, new_checkpoint)
            break
        except ReadError as exc:
            if UNCHECKED in str(exc) and spec.read_bounds is None:
                # a Debezium PostgreSQL change far before its last commit: its partition's
                # snapshot reads decide its key (changelog/debezium_ordering.py, _far)
                spec = replace(spec, read_bounds=read_bounds.from_raw(spark, tables.raw))
                log.info("job %s batch %d: a change far before the commit streamed before "
                         "its transaction's; read again with the raw table's snapshot-read "
                         "bounds %s", job.name, batch_id, spec.read_bounds)
            else:  # a JSON Debezium job follows a column added at the source
                changes = follow(settings, job, exc) if follows < MAX_FOLLOWS else []
                if not changes:
                    raise
                follows += 1
                run.details.setdefault("schema_followed", []).extend(changes)
                spec = replace(spec, schema=ChangelogSchema.of(settings, job))
                ensure_table(spark, tables.raw, spec.schema.raw_columns())
        report = spark.sparkContext.accumulator(TaskReport(), TaskReportParam())
        check_held(job.name)
    schema = spec.schema
    totals: TaskReport = report.value
    if spec.read_bounds is not None:
        read_bounds.remember(job.name, new_checkpoint,
                             read_bounds.merged(spec.read_bounds, totals.read_bounds))
    if totals.read:
        new_checkpoint = replace(new_checkpoint, bytes_per_message=totals.bytes / totals.read)
    log.info("job %s batch %d: read %d messages (%d bytes), committed %s with checkpoint %s "
             "in %.1fs", job.name, batch_id, totals.read, totals.bytes, tables.raw,
             dict(new_checkpoint.offsets), time.monotonic() - timer)
    fault_point("after_raw_commit")
    check_held(job.name)
    if totals.error_rows or totals.overflowed or totals.errors:
        _commit_errors(spark, settings, job, schema, spec, totals, new_checkpoint)
    else:  # no empty commit: the batch's errors are settled, the file says so
        _mark_settled(spark, job.name, new_checkpoint)
    fault_point("after_error_commit")
    landed = totals.read - totals.errors
    run.count("read", totals.read)
    run.count("landed", landed)
    run.count("decode_errors", totals.errors)
    run.count("bytes", totals.bytes)
    run.details["checkpoint_to"] = dict(new_checkpoint.offsets)
    if totals.newest_ms:
        run.details["newest_ms"] = totals.newest_ms
    run.details["errors_collected"] = {"rows": len(totals.error_rows),
                                       "bytes": totals.error_bytes,
                                       "budget": error_budget_bytes,
                                       "re_read_units": len(totals.overflowed)}
    if totals.losses:  # records retention deleted after planning, accepted by policy
        gone = sorted(totals.losses)
        run.details.setdefault("data_loss", []).extend(
            {"topic": t, "partition": p, "start": a, "end": b} for t, p, a, b in gone)
        run.count("lost", run.counts.get("lost", 0) + sum(b - a for _, _, a, b in gone))
        log.warning("job %s batch %d: accepted data loss while reading (deleted after "
                    "planning): %s", job.name, batch_id, gone)
    log.info("job %s batch %d: read %d, landed %d in %s, %d errors in %s", job.name, batch_id,
             totals.read, landed, tables.raw, totals.errors, tables.raw_errors)
    return IngestResult(batch_id, totals.read, landed, totals.errors, totals.bytes, work,
                        new_checkpoint)


def _read(spark: SparkSession, spec: ReadSpec, units: tuple[WorkUnit, ...],
          report: Accumulator[TaskReport] | None) -> DataFrame:
    """The reader tasks' output as a DataFrame (lazy: it reads when written)."""
    if not units:
        return spark.createDataFrame([], spec.output_ddl())
    rows = [(u.topic, u.partition, u.start, u.end) for u in units]
    # createDataFrame on ``spark``, not rdd.toDF(): that binds the thread's active session,
    # which need not be this one (a format's write may leave its own active)
    tasks = spark.createDataFrame(spark.sparkContext.parallelize(rows, len(rows)),
                                  "topic string, partition int, start bigint, end bigint")
    return tasks.mapInArrow(lambda batches: read_units(spec, batches, report),
                            spec.output_ddl())


def _pin_start(spark: SparkSession, job: JobConfig, work: Plan) -> Checkpoint:
    """``starting_offsets: latest`` on a job's first run: commit the end offsets it found as
    batch 0 (no rows) to both raw tables, so that later runs read everything after them rather
    than starting at "latest" again."""
    tables = JobTables(job.name)
    check_held(job.name)
    pinned = Checkpoint(job.topic, dict(work.next_offsets), 0, None, dict(work.start),
                        work.topic_id, job.row_key_encoding)
    for table in (tables.raw, tables.raw_errors):
        append_with_checkpoint(read_table(spark, table).limit(0), table, pinned)
    log.info("job %s: starts at the end of %s as it is now (starting_offsets: latest): %s",
             job.name, job.topic, dict(pinned.offsets))
    return pinned


def _check_row_key_encoding(spark: SparkSession, job: JobConfig, schema: ChangelogSchema,
                            checkpoint: Checkpoint | None) -> None:
    """Stop before reading when the raw table's rows were keyed with another encoding than
    the job's and the two differ for this job's key: re-keying silently would give one row
    two lake rows (issue #9.7). A checkpoint without an encoding predates it: joined."""
    if checkpoint is None or not schema.keyed_differently():
        return
    stored = checkpoint.row_key_encoding or JOINED
    if stored == schema.row_key_encoding:
        return
    raw = JobTables(job.name).raw
    if checkpoint.row_key_encoding is None and spark.table(raw).limit(1).count() == 0:
        return  # pinned, no row keyed yet
    raise RowKeyEncodingError(raw, job.name, stored, schema.row_key_encoding)


def _commit_raw(spark: SparkSession, raw_rows: DataFrame, job: JobConfig,
                checkpoint: Checkpoint) -> None:
    """Read, decode and append the raw rows in one Spark job, with the checkpoint."""
    with _Progress(spark):
        try:
            append_with_checkpoint(raw_rows, JobTables(job.name).raw, checkpoint)
        except SluiceError:
            raise
        except Exception as exc:  # Py4JJavaError / PythonException from a task
            raise _spark_error(exc) from exc


def _commit_errors(spark: SparkSession, settings: Settings, job: JobConfig,
                   schema: ChangelogSchema, spec: ReadSpec, totals: TaskReport,
                   checkpoint: Checkpoint) -> None:
    """Append the batch's error rows (maybe none), with the batch's checkpoint."""
    frames = [_error_frame(spark, [])]
    if totals.error_rows:
        frames = [_error_frame(spark, totals.error_rows)]
    if totals.overflowed:
        units = tuple(WorkUnit(*unit) for unit in totals.overflowed)
        log.info("job %s: %d work units had too many error rows to collect; re-reading them "
                 "for their error rows", job.name, len(units))
        frames.append(_read(spark, replace(spec, mode="errors"), units, None))
    rows = frames[0]
    for frame in frames[1:]:
        rows = rows.unionByName(frame)
    append_with_checkpoint(rows, JobTables(job.name).raw_errors, checkpoint)


SETTLED_DIR = "meta/.sluice_settled"  # a dot folder: no catalog takes it for a namespace


def _settled_path(spark: SparkSession, job: str) -> str:
    from python_ingest.runtime.catalog import WAREHOUSE_CONF

    return f"{spark.conf.get(WAREHOUSE_CONF)}/{SETTLED_DIR}/{job}.json"


def _settled(spark: SparkSession, job: str) -> Checkpoint | None:
    """The checkpoint of the last batch whose errors were settled without a commit."""
    jvm = spark._jvm
    assert jvm is not None
    path = jvm.org.apache.hadoop.fs.Path(_settled_path(spark, job))
    fs = path.getFileSystem(spark._jsc.hadoopConfiguration())
    if not fs.exists(path):
        return None
    stream = fs.open(path)
    try:
        text = jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()
    return Checkpoint.from_json(str(text))


def _mark_settled(spark: SparkSession, job: str, checkpoint: Checkpoint) -> None:
    """Say that ``checkpoint``'s batch has no error rows (written whole or not at all)."""
    from python_ingest.runtime.catalog import replace_file

    replace_file(spark, _settled_path(spark, job), checkpoint.to_json())


def _error_frame(spark: SparkSession, rows: list[tuple[Any, ...]]) -> DataFrame:
    """Error rows collected from the tasks (timestamps as µs) as a DataFrame."""
    ddl = ", ".join(f"`{n}` {t}" for n, t in RAW_ERROR_COLUMNS)
    timestamps = [i for i, (_, t) in enumerate(RAW_ERROR_COLUMNS) if t == "timestamp"]
    converted = [tuple(datetime.fromtimestamp(v / 1_000_000, UTC) if i in timestamps else v
                       for i, v in enumerate(row)) for row in rows]
    return spark.createDataFrame(converted, ddl)


def _catch_up_errors(spark: SparkSession, settings: Settings, job: JobConfig,
                     schema: ChangelogSchema, checkpoint: Checkpoint | None,
                     run: Run) -> Checkpoint | None:
    """Give the error table the error rows of the last raw batch if it lacks them.

    That happens only when a run died between its raw commit and its error commit. The raw
    checkpoint says where the batch began; the offsets are read again (Kafka offsets never
    change) and only their error rows are kept. Returns the error table's checkpoint.
    """
    raw_errors = JobTables(job.name).raw_errors
    error_checkpoint = read_checkpoint(spark, raw_errors)
    settled = _settled(spark, job.name)
    # the file speaks for the raw table's own last batch only (a job started over keeps it)
    if settled is not None and checkpoint is not None \
            and (settled.batch_id, dict(settled.offsets)) == (checkpoint.batch_id,
                                                              dict(checkpoint.offsets)) \
            and (error_checkpoint is None or settled.batch_id > error_checkpoint.batch_id):
        error_checkpoint = settled
    if checkpoint is None or (error_checkpoint is not None
                              and error_checkpoint.batch_id >= checkpoint.batch_id):
        return error_checkpoint
    units = tuple(WorkUnit(job.topic, p, checkpoint.batch_start.get(p, end), end)
                  for p, end in sorted(checkpoint.offsets.items())
                  if checkpoint.batch_start.get(p, end) < end)
    log.warning("job %s: the error table lacks batch %d (the last run stopped between its "
                "commits); re-reading %d work units for its error rows", job.name,
                checkpoint.batch_id, len(units))
    spec = ReadSpec(job.reader, settings.kafka_for(job), job.read_timeout_s, schema,
                    checkpoint.batch_id, int(datetime.now(UTC).timestamp() * 1_000_000),
                    mode="errors")
    check_held(job.name)
    append_with_checkpoint(_read(spark, spec, units, None), raw_errors, checkpoint)
    run.details["recovered_error_batch"] = checkpoint.batch_id
    return checkpoint
