"""The Spark task side of ingestion: read work units from Kafka and decode them.

``read_units`` is the body of a ``mapInArrow``. Each task reads its own offset ranges straight
from the broker and decodes the Avro values; per message it only decodes Avro and appends to
lists, everything else is column-wise Arrow. Every message becomes exactly one row: a raw row,
or an error row.

The raw table is written in the same pass (no second read, no cache): raw rows are the
DataFrame's output, while error rows (normally few) travel back to the driver with the task's
counts in a ``TaskReport`` through a Spark accumulator. The driver holds them all at once, so
their size is bounded for the whole run: each work unit gets its share of the run's budget
(``error_budget_bytes``, set by the driver). A unit whose error rows exceed it sends none back
and is listed as overflowed: the driver then re-reads it in ``errors`` mode, where the output is
the error rows instead, written by the tasks into the error table (never collected).

A value that cannot become a raw value costs its own row an error row (``Decoder.to_arrow``);
should a chunk still fail to convert, its records are converted one by one and the ones that
fail become error rows: never the task.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.accumulators import AccumulatorParam

from python_ingest.changelog.debezium import ReadBound
from python_ingest.changelog.decode import Decoder, arrow_schema, raw_coordinates
from python_ingest.changelog.schema import RAW_ERROR_COLUMNS, ChangelogSchema
from python_ingest.exceptions import DecodeError, ReadError
from python_ingest.kafka import client as kafka_client
from python_ingest.sources.debezium.read_bounds import merged

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark import Accumulator

# A Spark task's Python worker has no logging set up: Python prints a library's warnings on
# its own, and the worker's stderr is the driver's console. kafka-python warns of each step of
# its network loop over 0.1 s ("blocking the event loop"), on a busy machine most of them; as
# the CLI does, its chatter stays out (a task's failure says what went wrong). Left alone where
# a process set the logger's level itself (the CLI's -v).
if logging.getLogger("kafka").level == logging.NOTSET:
    logging.getLogger("kafka").setLevel(logging.CRITICAL)

CHUNK_ROWS = 20_000
ERROR_BUDGET_BYTES = 32 * 1024 * 1024  # error rows the driver may hold, for the whole run
ERROR_ROW_OVERHEAD = 256  # bytes a collected error row costs beyond its bytes and reason
ErrorRow = tuple[Any, ...]  # values in RAW_ERROR_COLUMNS order


def error_row_bytes(row: ErrorRow) -> int:
    """What one error row costs the driver that collects it (an upper estimate)."""
    return len(row[2] or b"") + len(row[3] or b"") + len(row[1]) + ERROR_ROW_OVERHEAD


@dataclass(frozen=True)
class ReadSpec:
    """What a Spark task needs to read and decode its work units (pickled to executors)."""

    reader: str
    bootstrap: str
    timeout_s: float
    schema: ChangelogSchema
    batch_id: int
    ingested_at_us: int
    mode: str = "raw"  # raw: emit raw rows, report errors; errors: emit error rows only
    error_budget_bytes: int = ERROR_BUDGET_BYTES  # per work unit: its share of the run's
    accept_loss: bool = False  # records gone since planning: skip them (reported) or fail
    # Debezium PostgreSQL (changelog/debezium_ordering.py, ReadBound): the batch's first
    # offset per partition, and the largest snapshot-read bound landed before it per
    # partition (None: not known; a change that needs it stops the read for the driver)
    batch_start: dict[int, int] = field(default_factory=dict)
    read_bounds: dict[int, int] | None = None

    def output_columns(self) -> tuple[tuple[str, str], ...]:
        return self.schema.raw_columns() if self.mode == "raw" else RAW_ERROR_COLUMNS

    def output_ddl(self) -> str:
        """Spark DDL of a reader task's output."""
        return ", ".join(f"`{n}` {t}" for n, t in self.output_columns())


@dataclass
class TaskReport:
    """What tasks tell the driver besides their rows (summed over tasks by an accumulator)."""

    read: int = 0
    bytes: int = 0
    errors: int = 0
    error_rows: list[ErrorRow] = field(default_factory=list)
    error_bytes: int = 0  # what error_rows cost (error_row_bytes)
    overflowed: list[tuple[str, int, int, int]] = field(default_factory=list)  # work units
    # (topic, partition, first lost offset, first offset after) gone between plan and read
    losses: list[tuple[str, int, int, int]] = field(default_factory=list)
    newest_ms: int = 0  # the newest Kafka timestamp of a landed message (the status' freshness)
    read_bounds: dict[int, int] = field(default_factory=dict)  # partition: largest read bound

    def merge(self, other: TaskReport) -> TaskReport:
        self.newest_ms = max(self.newest_ms, other.newest_ms)
        self.read_bounds = merged(self.read_bounds, other.read_bounds)
        self.read += other.read
        self.bytes += other.bytes
        self.errors += other.errors
        self.error_rows.extend(other.error_rows)
        self.error_bytes += other.error_bytes
        self.overflowed.extend(other.overflowed)
        self.losses.extend(other.losses)
        return self


class TaskReportParam(AccumulatorParam[TaskReport]):
    """Accumulator parameter that merges task reports."""

    def zero(self, value: TaskReport) -> TaskReport:
        return TaskReport()

    def addInPlace(self, value1: TaskReport, value2: TaskReport) -> TaskReport:  # noqa: N802
        return value1.merge(value2)


@dataclass
class _Chunk:
    """Messages of one partition collected for one output batch."""

    partition: int
    records: list[dict[str, Any]] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    failed: list[tuple[int, str, bytes | None, bytes | None, int]] = field(
        default_factory=list)  # (offset, reason, key, value, timestamp ms)

    def __len__(self) -> int:
        return len(self.offsets) + len(self.failed)


class _Emitter:
    def __init__(self, spec: ReadSpec) -> None:
        import pyarrow as pa

        self.pa = pa
        self.spec = spec
        self.decoder = Decoder(spec.schema)
        self.schema = arrow_schema(spec.output_columns())
        self.changelog_names = [n for n, _ in self.decoder.columns]
        self.report = TaskReport()

    def add(self, chunk: _Chunk, batch: kafka_client.MessageBatch) -> None:
        """Decode a batch of messages into the chunk (the per-message hot loop)."""
        if self.decoder.debezium is not None and not all(batch.values):
            batch = _without_tombstones(batch)  # Debezium's tombstones: for compaction only
        self.report.bytes += (sum(map(len, filter(None, batch.keys)))
                              + sum(map(len, filter(None, batch.values))))
        decode = self.decoder.record
        records = chunk.records
        failed: list[int] = []
        for value in batch.values:
            try:
                records.append(decode(value))
            except DecodeError as exc:
                failed.append(len(records))
                records.append({"": str(exc)})
        if not failed:
            chunk.values.extend(batch.values)
            chunk.keys.extend(batch.keys)
            chunk.offsets.extend(batch.offsets)
            chunk.timestamps.extend(batch.timestamps_ms)
            return
        base = len(records) - len(batch)
        bad = set(failed)
        for i, (key, value, offset, timestamp) in enumerate(zip(
                batch.keys, batch.values, batch.offsets, batch.timestamps_ms, strict=True)):
            if base + i in bad:
                chunk.failed.append((offset, records[base + i][""], key, value, timestamp))
            else:
                chunk.values.append(value)
                chunk.keys.append(key)
                chunk.offsets.append(offset)
                chunk.timestamps.append(timestamp)
        chunk.records[base:] = [r for i, r in enumerate(records[base:]) if base + i not in bad]

    def flush(self, chunk: _Chunk) -> tuple[pa.RecordBatch | None, list[ErrorRow]]:
        """The chunk's raw rows (raw mode only) and its error rows."""
        pa = self.pa
        self.report.read += len(chunk)
        if chunk.timestamps:
            self.report.newest_ms = max(self.report.newest_ms, max(chunk.timestamps))
        raw = None
        if chunk.records:
            try:
                changelog, bad = self.decoder.to_arrow(chunk.records)
            except Exception:  # noqa: BLE001  # an input to_arrow does not foresee
                self._isolate(chunk)
                changelog, bad = self.decoder.to_arrow(chunk.records)
        failed = list(chunk.failed)
        if chunk.records:
            failed += [(chunk.offsets[i], reason, chunk.keys[i], chunk.values[i],
                        chunk.timestamps[i]) for i, reason in bad.items()]
            if self.spec.mode == "raw":
                n = changelog.num_rows
                by_name = dict(zip(self.changelog_names, changelog.columns, strict=True))
                by_name.update(self._coords(chunk.partition, chunk.offsets, chunk.timestamps))
                raw = pa.RecordBatch.from_arrays(
                    [by_name[f.name] for f in self.schema], schema=self.schema)
                if bad:
                    raw = raw.filter(pa.array([i not in bad for i in range(n)]))
        self.report.errors += len(failed)
        ingested_at = self.spec.ingested_at_us
        rows = [(key.decode("utf-8", "replace") if key else None, reason, value, key,
                 chunk.partition, offset, timestamp * 1000, self.spec.batch_id, ingested_at)
                for offset, reason, key, value, timestamp in failed]
        return raw, rows

    def _isolate(self, chunk: _Chunk) -> None:
        """Move the records that fail to convert on their own to the chunk's error rows."""
        keep = []
        for index, record in enumerate(chunk.records):
            try:
                self.decoder.to_arrow([record])
                keep.append(index)
            except Exception as exc:  # noqa: BLE001  # one record's fault, never the task's
                chunk.failed.append((chunk.offsets[index],
                                     f"conversion failed: {type(exc).__name__}: {exc}",
                                     chunk.keys[index], chunk.values[index],
                                     chunk.timestamps[index]))
        chunk.records = [chunk.records[i] for i in keep]
        chunk.values = [chunk.values[i] for i in keep]
        chunk.keys = [chunk.keys[i] for i in keep]
        chunk.offsets = [chunk.offsets[i] for i in keep]
        chunk.timestamps = [chunk.timestamps[i] for i in keep]

    def _coords(self, partition: int, offsets: list[int],
                timestamps: list[int]) -> dict[str, pa.Array]:
        pa = self.pa
        utc_us = pa.timestamp("us", tz="UTC")
        return raw_coordinates(partition, offsets, pa.array(timestamps, pa.int64()).cast(
            pa.timestamp("ms", tz="UTC")).cast(utc_us), self.spec.batch_id,
            self.spec.ingested_at_us)

    def error_batch(self, rows: list[ErrorRow]) -> pa.RecordBatch:
        """Error rows as an Arrow batch (errors mode)."""
        pa = self.pa
        columns = list(zip(*rows, strict=True))
        arrays = [pa.array(list(values), f.type) if f.type != pa.timestamp("us", tz="UTC")
                  else pa.array(list(values), pa.int64()).cast(f.type)
                  for values, f in zip(columns, self.schema, strict=True)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def _read_bound(spec: ReadSpec, unit: dict[str, Any]) -> ReadBound:
    """What a Debezium PostgreSQL change far before its ``last`` is checked against in this
    work unit (``ReadBound``): the driver's bound for the partition when the unit starts
    the batch's range of it; else that bound and the snapshot reads of the batch's messages
    before the unit, read again only when a change needs them (a long transaction)."""
    if spec.mode != "raw" or spec.schema.debezium is None:
        return ReadBound()
    partition, start = unit["partition"], unit["start"]
    before = None if spec.read_bounds is None else spec.read_bounds.get(partition, 0)
    first = spec.batch_start.get(partition, start)
    if before is None or first >= start:
        return ReadBound(check=True, before=before)

    def resolve() -> int:
        scan = Decoder(spec.schema)  # unchecked: only the reads' bounds are wanted
        for batch in kafka_client.read_batches(spec.reader, spec.bootstrap, unit["topic"],
                                               partition, first, start, spec.timeout_s,
                                               on_loss=lambda *_: None):
            for value in batch.values:
                if value:
                    try:
                        scan.record(value)
                    except (DecodeError, ReadError):
                        continue  # an error row, or a change this unit's check reports
        return max(before, scan.bounds.seen)

    return ReadBound(check=True, before=None, resolve=resolve)


def _without_tombstones(batch: kafka_client.MessageBatch) -> kafka_client.MessageBatch:
    """The batch without its null values (a Debezium delete's tombstone follows the delete
    event, so that log compaction can drop the key: no change of its own)."""
    kept = [i for i, value in enumerate(batch.values) if value]
    return kafka_client.MessageBatch([batch.keys[i] for i in kept],
                                     [batch.values[i] for i in kept],
                                     [batch.offsets[i] for i in kept],
                                     [batch.timestamps_ms[i] for i in kept])


def decode_messages(spec: ReadSpec, partition: int, batch: kafka_client.MessageBatch
                    ) -> tuple[pa.RecordBatch | None, list[ErrorRow]]:
    """Decode messages kept elsewhere (an error table's bytes) exactly as a read task does:
    their raw rows and the error rows of those that still fail."""
    emitter = _Emitter(spec)
    chunk = _Chunk(partition)
    emitter.add(chunk, batch)
    return emitter.flush(chunk)


def read_units(spec: ReadSpec, batches: Iterable[pa.RecordBatch],
               report: Accumulator[TaskReport] | None = None) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: read each work unit (topic, partition, start, end) and emit rows."""
    emitter = _Emitter(spec)
    for batch in batches:
        for unit in batch.to_pylist():
            yield from _read_unit(spec, emitter, unit)
    if report is not None:
        report.add(emitter.report)


def _read_unit(spec: ReadSpec, emitter: _Emitter,
               unit: dict[str, Any]) -> Iterator[pa.RecordBatch]:
    """Read one work unit; its error rows go to the report unless they exceed its budget."""
    unit_errors: list[ErrorRow] = []
    error_bytes = 0

    def emit(chunk: _Chunk) -> Iterator[pa.RecordBatch]:
        nonlocal error_bytes
        raw, errors = emitter.flush(chunk)
        if raw is not None and raw.num_rows:
            yield raw
        if spec.mode == "errors":
            if errors:
                yield emitter.error_batch(errors)
        elif error_bytes <= spec.error_budget_bytes:
            error_bytes += sum(map(error_row_bytes, errors))
            if error_bytes <= spec.error_budget_bytes:
                unit_errors.extend(errors)
            else:  # re-read by the driver: keep nothing
                unit_errors.clear()

    def lost(first: int, after: int) -> None:
        emitter.report.losses.append((unit["topic"], unit["partition"], first, after))

    bounds = _read_bound(spec, unit)
    emitter.decoder.bounds = bounds
    chunk = _Chunk(unit["partition"])
    for batch in kafka_client.read_batches(spec.reader, spec.bootstrap, unit["topic"],
                                           unit["partition"], unit["start"], unit["end"],
                                           spec.timeout_s,
                                           on_loss=lost if spec.accept_loss else None):
        emitter.add(chunk, batch)
        if len(chunk) >= CHUNK_ROWS:
            yield from emit(chunk)
            chunk = _Chunk(unit["partition"])
    if len(chunk):
        yield from emit(chunk)
    if bounds.seen:
        emitter.report.read_bounds = merged(emitter.report.read_bounds,
                                            {unit["partition"]: bounds.seen})
    if spec.mode == "errors":
        return
    if error_bytes > spec.error_budget_bytes:
        emitter.report.overflowed.append((unit["topic"], unit["partition"], unit["start"],
                                          unit["end"]))
    else:
        emitter.report.error_rows.extend(unit_errors)
        emitter.report.error_bytes += error_bytes
