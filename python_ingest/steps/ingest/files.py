"""The ingestion step of a files job: ready partitions → raw.<job> and errors.<job>__raw.

A run lists the landing dir, takes the ready partitions no other run holds (oldest first,
within the caps), leases them, and reads their files on the driver into raw rows (staged as
one Parquet file under the state dir, so Spark appends them in one job). Then, under the
job's commit lock, it re-reads the raw checkpoint, drops any partition another run committed
meanwhile, and commits the raw rows with the new checkpoint (the processed partitions, batch
id + 1), then the batch's error rows with the same checkpoint. A run that dies between the two
commits leaves the error table a batch behind; the next run re-reads that batch's partitions
(the checkpoint names them) for their error rows, as the Kafka step does with its offsets.

Raw rows are a Kafka job's: ``_kafka_partition`` is the file's index in the batch (partitions
in key order, files by name), ``_kafka_offset`` the record's number in its file and
``_kafka_timestamp`` the file's mtime, so (``_batch_id``, ``_kafka_partition``,
``_kafka_offset``) names one record and later steps order copies as they do for Kafka.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from python_ingest.changelog.decode import arrow_schema, raw_coordinates
from python_ingest.changelog.schema import RAW_ERROR_COLUMNS, ChangelogSchema
from python_ingest.config import JobConfig, Settings
from python_ingest.config.files import FileSourceConfig
from python_ingest.runtime.faults import fault_point
from python_ingest.sources.files.leases import PartitionLeases, commit_lock, lease_dir
from python_ingest.sources.files.partitions import (
    Partition,
    discover,
    is_late,
    newest_arrival,
    select,
)
from python_ingest.sources.files.reader import FileReader, ParsedFile
from python_ingest.sources.kafka.workunits import Plan
from python_ingest.steps.ingest.outcome import IngestResult
from python_ingest.tables.checkpoints import (
    Checkpoint,
    ProcessedPartitions,
    append_with_checkpoint,
    read_checkpoint,
)
from python_ingest.tables.formats import ensure_table
from python_ingest.tables.lease import check_held
from python_ingest.tables.names import JobTables
from python_ingest.tables.runs import Run

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
STAGING_DIR = "file-staging"  # under the state dir: a run's rows as Parquet until committed
_NO_PLAN = Plan(units=(), start={}, next_offsets={}, lag={})


def source_of(job: JobConfig) -> FileSourceConfig:
    assert job.files is not None, f"job {job.name} is not a files job"
    return job.files


def _ddl(columns: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"`{n}` {t}" for n, t in columns)


def files_ingest(spark: SparkSession, settings: Settings, job: JobConfig,
                 run: Run) -> IngestResult:
    """Run one ingestion of files job ``job``; fills ``run`` with counts."""
    source = source_of(job)
    schema = ChangelogSchema.of(settings, job)
    tables = JobTables(job.name)
    state_dir = settings.path(settings.state_dir)
    folder = lease_dir(state_dir, job.name)
    reader = FileReader(schema)
    with commit_lock(folder):  # two first runs at once create the tables once
        ensure_table(spark, tables.raw, schema.raw_columns())
        ensure_table(spark, tables.raw_errors, RAW_ERROR_COLUMNS)
        _catch_up_errors(spark, job, reader, run)
        _sweep_staging(state_dir / STAGING_DIR / job.name, source.lease_timeout)
    checkpoint = read_checkpoint(spark, tables.raw)
    leases = PartitionLeases(folder, run.run_id, source.lease_timeout)
    staging = state_dir / STAGING_DIR / job.name / run.run_id
    try:
        listed = discover(source.path)
        processed = checkpoint.files if checkpoint and checkpoint.files else ProcessedPartitions()
        leases.sweep(processed)
        chosen = select(listed, processed, source, job.max_bytes, busy=leases.busy())
        taken = [p for p in chosen.take if leases.take(p.key)]
        run.details["partitions_waiting"] = list(chosen.waiting)
        run.details["partitions_left"] = list(chosen.left)
        _report_late(job, run, processed, chosen.late)
        if not taken:
            log.info("job %s: up to date (no ready partition in %s; %d still settling)",
                     job.name, source.path, len(chosen.waiting))
            for name in ("read", "landed", "decode_errors", "bytes"):
                run.count(name, 0)
            return IngestResult(None, 0, 0, 0, 0, _NO_PLAN, checkpoint)
        parsed, changed = _read(reader, taken)
        if changed:
            run.details["partitions_changed_while_read"] = changed
            log.warning("job %s: partitions changed while read, left for a later run: %s",
                        job.name, changed)
        fault_point("after_files_read")
        with commit_lock(folder):
            latest = read_checkpoint(spark, tables.raw)
            done = latest.files if latest and latest.files else ProcessedPartitions()
            batch = {key: files for key, files in parsed.items() if key not in done}
            if len(batch) < len(parsed):
                log.info("job %s: %d partitions were committed by another run meanwhile",
                         job.name, len(parsed) - len(batch))
            if not batch:
                for name in ("read", "landed", "decode_errors", "bytes"):
                    run.count(name, 0)
                return IngestResult(None, 0, 0, 0, 0, _NO_PLAN, latest)
            batch_id = (latest.batch_id if latest else 0) + 1
            run.batch_id = batch_id
            now = time.time()
            pending = [*chosen.pending, *(p.key for p in chosen.take if p.key not in batch)]
            found_late = [*chosen.late, *(p.key for p in listed if is_late(p, done))]
            files_state = done.adding(batch, now).compacted(
                pending, now, source.lateness_seconds, newest_arrival(listed),
            ).with_late(found_late)
            new_checkpoint = Checkpoint(f"files:{source.path}", {}, batch_id,
                                        row_key_encoding=schema.row_key_encoding,
                                        files=files_state)
            ordered = [f for key in sorted(batch) for f in batch[key]]
            ingested_at = datetime.now(UTC)
            raw_rows = _raw_frame(spark, schema, ordered, batch_id, ingested_at, staging)
            fault_point("before_raw_commit")
            check_held(job.name)
            append_with_checkpoint(raw_rows, tables.raw, new_checkpoint)
            fault_point("after_raw_commit")
            check_held(job.name)
            append_with_checkpoint(_error_frame(spark, ordered, batch_id, ingested_at),
                                   tables.raw_errors, new_checkpoint)
            fault_point("after_error_commit")
    finally:
        leases.release()
        shutil.rmtree(staging, ignore_errors=True)
    read = sum(f.read for f in ordered)
    errors = sum(len(f.errors) for f in ordered)
    size = sum(f.file.size for f in ordered)
    run.count("read", read)
    run.count("landed", read - errors)
    run.count("decode_errors", errors)
    run.count("bytes", size)
    run.details["partitions"] = sorted(batch)
    run.details["files"] = len(ordered)
    run.details["checkpoint_to"] = files_state.to_dict()
    run.count("late_partitions", len(files_state.late))
    log.info("job %s batch %d: %d partitions, %d files: read %d, landed %d in %s, %d errors "
             "in %s", job.name, batch_id, len(batch), len(ordered), read, read - errors,
             tables.raw, errors, tables.raw_errors)
    return IngestResult(batch_id, read, read - errors, errors, size, _NO_PLAN, new_checkpoint)


def _report_late(job: JobConfig, run: Run, processed: ProcessedPartitions,
                 late: Sequence[str]) -> None:
    """Say which partitions are skipped as late: the run's details and log, and the count of
    late partitions found so far (``late_partitions``, which `sluice status` shows)."""
    run.details["partitions_late"] = list(late)
    run.count("late_partitions", len({*processed.late, *late}))
    if late:
        log.warning("job %s: %d late partition(s) skipped, never to be read: %s (they sort at or "
                    "below the watermark %s but arrived after the listing behind it; "
                    "lateness_seconds is %g; to land one, move its files to a new partition "
                    "whose key sorts above the watermark: docs/files-source.md)", job.name,
                    len(late), list(late), processed.watermark,
                    source_of(job).lateness_seconds)


def _read(reader: FileReader, partitions: Sequence[Partition]) -> tuple[
        dict[str, list[ParsedFile]], list[str]]:
    """Read the partitions' files; a partition whose files changed meanwhile is left out."""
    parsed: dict[str, list[ParsedFile]] = {}
    changed: list[str] = []
    for partition in partitions:
        files = [reader.read(f) for f in partition.files]
        if any(f.changed() for f in partition.files):
            changed.append(partition.key)
        else:
            parsed[partition.key] = files
    return parsed, changed


def _raw_frame(spark: SparkSession, schema: ChangelogSchema, files: Sequence[ParsedFile],
               batch_id: int, ingested_at: datetime, staging: Path) -> DataFrame:
    """The batch's raw rows, staged as one Parquet file that Spark reads when it appends."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = schema.raw_columns()
    if not any(f.changelog is not None and f.changelog.num_rows for f in files):
        return spark.createDataFrame([], _ddl(columns))
    target = arrow_schema(columns)
    batches = [_with_coords(f, index, batch_id, ingested_at, target)
               for index, f in enumerate(files)
               if f.changelog is not None and f.changelog.num_rows]
    staging.mkdir(parents=True, exist_ok=True)
    path = staging / "raw.parquet"
    pq.write_table(pa.Table.from_batches(batches, schema=target), path)
    from pyspark.sql import functions as F  # noqa: N812

    frame = spark.read.parquet(str(path))
    return frame.select(*[F.col(f"`{n}`").cast(t).alias(n) for n, t in columns])


def _with_coords(parsed: ParsedFile, index: int, batch_id: int, ingested_at: datetime,
                 target: pa.Schema) -> pa.RecordBatch:
    import pyarrow as pa

    assert parsed.changelog is not None
    n = parsed.changelog.num_rows
    utc_us = pa.timestamp("us", tz="UTC")
    by_name = dict(zip(parsed.changelog.schema.names, parsed.changelog.columns, strict=True))
    by_name.update(raw_coordinates(
        index, parsed.offsets,
        pa.array([parsed.file.mtime_ns // 1000] * n, pa.int64()).cast(utc_us), batch_id,
        (ingested_at - _EPOCH) // timedelta(microseconds=1)))
    return pa.RecordBatch.from_arrays([by_name[f.name] for f in target], schema=target)


def _error_frame(spark: SparkSession, files: Sequence[ParsedFile], batch_id: int,
                 ingested_at: datetime) -> DataFrame:
    """The batch's error rows: error_exception names the file; offset is the record's number
    (null when the whole file could not be parsed)."""
    rows: list[tuple[Any, ...]] = []
    for index, parsed in enumerate(files):
        mtime = datetime.fromtimestamp(parsed.file.mtime_ns / 1e9, UTC)
        rows += [(None, f"file {parsed.file.path}: {reason}", data, None, index, offset, mtime,
                  batch_id, ingested_at) for offset, reason, data in parsed.errors]
    return spark.createDataFrame(rows, _ddl(RAW_ERROR_COLUMNS))


def _sweep_staging(folder: Path, older_than_s: float) -> None:
    """Remove the staged rows of runs that died (kill -9) before cleaning up after
    themselves: a live run's are younger than its leases' timeout."""
    if not folder.is_dir():
        return
    cutoff = time.time() - older_than_s
    for staged in folder.iterdir():
        try:
            if staged.stat().st_mtime < cutoff:
                shutil.rmtree(staged, ignore_errors=True)
        except FileNotFoundError:
            continue


def _catch_up_errors(spark: SparkSession, job: JobConfig, reader: FileReader,
                     run: Run) -> None:
    """Give the error table the error rows of the last raw batch if it lacks them (a run
    died between its two commits): re-read that batch's partitions, named in the raw
    checkpoint, and commit only their error rows, with that checkpoint."""
    tables = JobTables(job.name)
    checkpoint = read_checkpoint(spark, tables.raw)
    error_checkpoint = read_checkpoint(spark, tables.raw_errors)
    if checkpoint is None or checkpoint.files is None or (
            error_checkpoint is not None and error_checkpoint.batch_id >= checkpoint.batch_id):
        return
    keys = set(checkpoint.files.batch)
    partitions = [p for p in discover(source_of(job).path) if p.key in keys]
    missing = keys - {p.key for p in partitions}
    if missing:
        log.warning("job %s: partitions of batch %d are gone from the landing dir; their "
                    "error rows cannot be recovered: %s", job.name, checkpoint.batch_id,
                    sorted(missing))
    log.warning("job %s: the error table lacks batch %d (the last run stopped between its "
                "commits); re-reading its %d partitions for their error rows", job.name,
                checkpoint.batch_id, len(partitions))
    files = [reader.read(f) for p in sorted(partitions, key=lambda p: p.key) for f in p.files]
    check_held(job.name)
    append_with_checkpoint(_error_frame(spark, files, checkpoint.batch_id,
                                        datetime.now(UTC)),
                           tables.raw_errors, checkpoint)
    run.details["recovered_error_batch"] = checkpoint.batch_id
