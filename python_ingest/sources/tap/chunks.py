"""A bootstrap's key-ordered chunks and the read that turns a chunk's rows into raw rows
without Kafka in between (the direct bootstrap, issue #62; docs/bootstrap.md): what every
source kind's chunk reader shares (binlog/bulk_read.py, postgres/direct.py)."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from python_ingest.config import SourceConfig
from python_ingest.exceptions import SluiceError
from python_ingest.kafka.client import MessageBatch
from python_ingest.sources.kafka.reader import ReadSpec, decode_messages
from python_ingest.sources.tap.errors import ErrorSink, publish

if TYPE_CHECKING:
    import pyarrow as pa

Key = tuple[Any, ...]
CHUNK_DDL = "chunk int, bounds binary"  # a task's input: the chunk's index and its pickle


@dataclass(frozen=True)
class Chunk:
    """Keys in (after, upto]; None means unbounded on that side."""

    index: int
    after: Key | None
    upto: Key | None


@dataclass(frozen=True)
class Road:
    """A source kind's side of ``sluice bootstrap --direct`` (steps/bootstrap.py; the kind's
    ``direct`` part, tap/kinds.py):

    - ``prepare(settings, source, table)``: the table checked and registered, the tap's
      checkpoint store locked, the hand-over position noted; returns an object with ``conn``
      (for the next two), ``table`` (``shape``, ``topic``), ``p0``, ``p0_gtid``,
      ``hand_over() -> str`` and ``close()``;
    - ``chunk_bounds(conn, shape, chunk_rows, first_rows)``: key-ordered ``Chunk``s
      (``key_ranges``);
    - ``estimate(conn, table)``: the table's rows, for the ETA;
    - ``work(prepared, source, spec, bootstrap_servers)``: what a Spark task needs to read
      chunks (pickled), and ``read_one(work, chunk)``: one chunk's raw rows, in a task
      (``read_chunks`` runs it over the task's ``CHUNK_DDL`` rows);
    - ``jvm_unfit(source, table, conn)``: why a wave is not one Spark JDBC read (None: it
      is, by ``jvm_frame(spark, source, prepared, spec, chunks)``)."""

    prepare: Callable[..., Any]
    chunk_bounds: Callable[..., list[Chunk]]
    estimate: Callable[..., int]
    work: Callable[..., Any]
    read_one: Callable[..., Iterator[pa.RecordBatch]]
    jvm_unfit: Callable[..., str | None]
    jvm_frame: Callable[..., Any] | None = None


def chunkable(shape: Any) -> bool:
    """Whether ``shape``'s rows can be cut into key ranges: key columns none of which may be
    NULL. A NULL compares as unknown, so a row whose key holds one would be in no range (a
    ``key_columns`` entry may name a nullable column): such a table is read as one chunk."""
    return bool(shape.key.columns) and not any(shape.spec(c).nullable
                                               for c in shape.key.columns)


def key_ranges(cur: Any, probe: Callable[[Key | None, int], tuple[str, list[Any]]],
               chunk_rows: int, first_rows: int | None = None) -> list[Chunk]:
    """Chunks between the keys ``probe`` finds: ``probe(after, size)`` is the SQL (and its
    parameters) of the key ``size`` rows after ``after`` in key order (None: from the first
    row), no row when fewer are left; the first chunk of ``first_rows`` when given."""
    bounds: list[Key] = []
    while True:
        size = first_rows if first_rows and not bounds else chunk_rows
        sql, params = probe(bounds[-1] if bounds else None, size)
        cur.execute(sql, params)
        row = cur.fetchone()
        if row is None:
            break
        bounds.append(tuple(row))
    edges: list[Key | None] = [None, *bounds, None]
    return [Chunk(i, edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


def chunk_rows(chunks: Iterable[Chunk]) -> list[tuple[int, bytes]]:
    """The tasks' input rows (``CHUNK_DDL``)."""
    return [(c.index, pickle.dumps(c)) for c in chunks]


def read_chunks(read_one: Callable[[Any, Chunk], Iterator[pa.RecordBatch]], work: Any,
                batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: the raw rows of each chunk a task's ``CHUNK_DDL`` rows name."""
    for batch in batches:
        for row in batch.to_pylist():
            yield from read_one(work, pickle.loads(row["bounds"]))


class Collected:
    """Stands for the producer: keeps what would have been sent."""

    def __init__(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.other: list[tuple[str, bytes, bytes]] = []  # error records
        self.topic = ""

    def send(self, topic: str, key: bytes, value: bytes) -> int:
        if topic == self.topic:
            self.keys.append(key)
            self.values.append(value)
        else:
            self.other.append((topic, key, value))
        return 0


def decoded(spec: ReadSpec, qualified: str, chunk: Chunk, collected: Collected, offset: int,
            now_ms: int) -> Iterator[pa.RecordBatch]:
    """The rows ``collected`` holds, decoded by the ingestion's decoder as raw rows."""
    if not collected.keys:
        return
    count = len(collected.keys)
    batch = MessageBatch(collected.keys, collected.values, list(range(offset, offset + count)),
                         [now_ms] * count)
    raw, errors = decode_messages(spec, chunk.index, batch)
    if errors:  # what the tap encoded, the job's schema must read: a mismatch is a bug
        raise SluiceError(f"bootstrap of {qualified}: {len(errors)} rows of "
                          f"chunk {chunk.index} do not decode with the job's schema: "
                          f"{errors[0]}")
    if raw is not None and raw.num_rows:
        yield raw


def send_errors(bootstrap_servers: str, records: list[tuple[str, bytes, bytes]]) -> None:
    """The chunk's error records to the source's error topic, as the tap sends them."""
    from python_ingest.sources.tap.producer import ChangelogProducer

    producer = ChangelogProducer(bootstrap_servers)
    for topic, key, value in records:
        producer.send(topic, key, value)
    producer.flush()


def published_rows(spec: ReadSpec, source: SourceConfig, registry: str, bootstrap_servers: str,
                   topic: str, encoder: Any, key_columns: tuple[str, ...], qualified: str,
                   chunk: Chunk, now_ms: int, changes: Iterable[tuple[Any, Any, Any]],
                   rows_per_batch: int) -> Iterator[pa.RecordBatch]:
    """A chunk's ``changes`` (each a change, its source position and envelope) published as
    the tap publishes them (``publish``: a value that cannot be encoded left out, its error
    record to the source's error topic, ``registry`` the source's registry root) into memory,
    and handed on as raw rows, ``rows_per_batch`` at a time."""
    collected = Collected()
    collected.topic = topic
    sink = ErrorSink(collected, source, Path(registry))  # type: ignore[arg-type]
    offset = 0
    for change, position, envelope in changes:
        publish(collected, topic, encoder, change, key_columns, sink,  # type: ignore[arg-type]
                qualified, position, envelope)
        if len(collected.keys) >= rows_per_batch:
            yield from decoded(spec, qualified, chunk, collected, offset, now_ms)
            offset += len(collected.keys)
            collected.keys, collected.values = [], []
    yield from decoded(spec, qualified, chunk, collected, offset, now_ms)
    if collected.other:
        send_errors(bootstrap_servers, collected.other)
