"""The Spark task side of ingestion: read work units from Kafka and decode them.

``read_units`` is the body of a ``mapInArrow``: each task reads its own offset ranges straight
from the broker, decodes the Avro values, and emits Arrow batches of the combined output (raw
columns + error columns; exactly one row per message, error rows have ``error_exception`` set).
Per message it only decodes Avro and appends to lists; everything else is column-wise Arrow.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from python_ingest import kafka_io
from python_ingest.changelog import ChangelogSchema, DecodeError, Decoder, combined_columns

if TYPE_CHECKING:
    import pyarrow as pa

CHUNK_ROWS = 20_000
MESSAGE_BYTES = "_message_bytes"  # per-row size, counted by the driver, not written


@dataclass(frozen=True)
class ReadSpec:
    """What a Spark task needs to read and decode its work units (pickled to executors)."""

    reader: str
    bootstrap: str
    timeout_s: float
    schema: ChangelogSchema
    batch_id: int
    ingested_at_us: int


def output_ddl(schema: ChangelogSchema) -> str:
    """Spark DDL of a reader task's output."""
    return ", ".join(f"`{n}` {t}" for n, t in [*combined_columns(schema),
                                               (MESSAGE_BYTES, "bigint")])


@dataclass
class _Chunk:
    """Messages of one partition collected for one output batch."""

    partition: int
    records: list[dict[str, Any]] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    failed: list[tuple[int, str, bytes | None, bytes | None, int, int]] = field(
        default_factory=list)  # (offset, reason, key, value, timestamp ms, size)

    def __len__(self) -> int:
        return len(self.offsets) + len(self.failed)


class _Emitter:
    def __init__(self, spec: ReadSpec) -> None:
        import pyarrow as pa

        self.spec = spec
        self.decoder = Decoder(spec.schema)
        columns = combined_columns(spec.schema)
        from python_ingest.changelog import arrow_schema

        self.schema = arrow_schema([*columns, (MESSAGE_BYTES, "bigint")])
        self.changelog_names = [n for n, _ in self.decoder.columns]
        self.pa = pa

    def add(self, chunk: _Chunk, message: kafka_io.Message) -> None:
        size = len(message.key or b"") + len(message.value or b"")
        try:
            record = self.decoder.record(message.value)
        except DecodeError as exc:
            chunk.failed.append((message.offset, str(exc), message.key, message.value,
                                 message.timestamp_ms, size))
            return
        chunk.records.append(record)
        chunk.values.append(message.value)
        chunk.keys.append(message.key)
        chunk.offsets.append(message.offset)
        chunk.timestamps.append(message.timestamp_ms)
        chunk.sizes.append(size)

    def batches(self, chunk: _Chunk) -> Iterator[pa.RecordBatch]:
        pa = self.pa
        failed = list(chunk.failed)
        if chunk.records:
            changelog, bad = self.decoder.to_arrow(chunk.records)
            n = changelog.num_rows
            by_name = dict(zip(self.changelog_names, changelog.columns, strict=True))
            by_name.update(self._coords(chunk.partition, chunk.offsets, chunk.timestamps,
                                        chunk.sizes))
            arrays = [by_name[f.name] if f.name in by_name else pa.nulls(n, f.type)
                      for f in self.schema]
            batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
            if bad:
                keep = pa.array([i not in bad for i in range(n)])
                batch = batch.filter(keep)
                failed += [(chunk.offsets[i], reason, chunk.keys[i], chunk.values[i],
                            chunk.timestamps[i], chunk.sizes[i]) for i, reason in bad.items()]
            yield batch
        if failed:
            yield self._errors(chunk.partition, failed)

    def _coords(self, partition: int, offsets: list[int], timestamps: list[int],
                sizes: list[int]) -> dict[str, pa.Array]:
        pa = self.pa
        n = len(offsets)
        utc_us = pa.timestamp("us", tz="UTC")
        return {
            "_kafka_partition": pa.array([partition] * n, pa.int32()),
            "_kafka_offset": pa.array(offsets, pa.int64()),
            "_kafka_timestamp": pa.array(timestamps, pa.int64()).cast(
                pa.timestamp("ms", tz="UTC")).cast(utc_us),
            "_batch_id": pa.array([self.spec.batch_id] * n, pa.int64()),
            "_ingested_at": pa.array([self.spec.ingested_at_us] * n, pa.int64()).cast(utc_us),
            MESSAGE_BYTES: pa.array(sizes, pa.int64()),
        }

    def _errors(self, partition: int,
                failed: list[tuple[int, str, bytes | None, bytes | None, int, int]]
                ) -> pa.RecordBatch:
        pa = self.pa
        by_name = self._coords(partition, [f[0] for f in failed], [f[4] for f in failed],
                               [f[5] for f in failed])
        by_name.update({
            "_row_key": pa.array([k.decode("utf-8", "replace") if k else None
                                  for _, _, k, *_ in failed], pa.string()),
            "error_exception": pa.array([f[1] for f in failed], pa.string()),
            "_kafka_key": pa.array([f[2] for f in failed], pa.binary()),
            "error_source_data": pa.array([f[3] for f in failed], pa.binary()),
        })
        n = len(failed)
        return pa.RecordBatch.from_arrays(
            [by_name[f.name] if f.name in by_name else pa.nulls(n, f.type) for f in self.schema],
            schema=self.schema)


def read_units(spec: ReadSpec, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: read each work unit (topic, partition, start, end) and emit rows."""
    emitter = _Emitter(spec)
    for batch in batches:
        for unit in batch.to_pylist():
            chunk = _Chunk(unit["partition"])
            for message in kafka_io.read_range(spec.reader, spec.bootstrap, unit["topic"],
                                               unit["partition"], unit["start"], unit["end"],
                                               spec.timeout_s):
                emitter.add(chunk, message)
                if len(chunk) >= CHUNK_ROWS:
                    yield from emitter.batches(chunk)
                    chunk = _Chunk(unit["partition"])
            if len(chunk):
                yield from emitter.batches(chunk)
