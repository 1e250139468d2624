"""The direct bootstrap's read (issue #62): key-range chunks read by Spark tasks, straight into
raw rows, with no Kafka in between.

Each task reads its chunks as today's bootstrap does (bootstrap.py ``read_chunk``): its own
``START TRANSACTION WITH CONSISTENT SNAPSHOT`` at an exact binlog position ``P_i``, every row
of the chunk a snapshot change with ``P_i`` as its ref key. The change is encoded exactly as
the tap publishes it (``tap.errors.publish``: a value that cannot be encoded left out and an
error record sent to the source's error topic) and decoded by the ingestion's own decoder
(``sources.kafka.reader.decode_messages``), so a chunk's raw rows are exactly the raw rows its
messages would have become after a trip through Kafka: the same columns, keys and values.
``_kafka_partition`` is the chunk's index and ``_kafka_offset`` the row's ordinal in the chunk
(unique per batch, as the fork's row id needs); ``_kafka_timestamp`` the snapshot's time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from python_ingest.config import SourceConfig
from python_ingest.sources.binlog import server
from python_ingest.sources.binlog.bootstrap import (
    chunk_bounds,
    chunk_predicate,
    prepare,
    snapshot_position,
)
from python_ingest.sources.binlog.columns import select_sql
from python_ingest.sources.binlog.events import Envelope, TappedTable, snapshot_change
from python_ingest.sources.binlog.jdbc_read import JdbcRead, chunk_frame, jvm_unfit
from python_ingest.sources.kafka.reader import ReadSpec
from python_ingest.sources.tap.chunks import Chunk, Road, published_rows

if TYPE_CHECKING:
    import pyarrow as pa

ROWS_PER_BATCH = 20_000  # rows decoded into one Arrow batch


@dataclass(frozen=True)
class BulkRead:
    """What a Spark task needs to read chunks into raw rows (pickled to the executors)."""

    source: SourceConfig
    table: TappedTable
    spec: ReadSpec  # the job's decoding of its messages, with the batch's id
    registry: str  # the source's registry root (its error records' schema)
    bootstrap_servers: str  # where the error records go
    generation: int  # the tap's ref key generation on this server (position.py)


def _select(table: TappedTable, chunk: Chunk) -> tuple[str, list[Any]]:
    shape = table.shape
    cols = ", ".join(select_sql(c, server.quote(c.name)) for c in shape.columns)
    name = f"{server.quote(shape.db)}.{server.quote(shape.table)}"
    where, params = chunk_predicate(shape.key.columns, chunk)
    return f"SELECT {cols} FROM {name} WHERE {where}", params


def read_one(work: BulkRead, chunk: Chunk) -> Iterator[pa.RecordBatch]:
    """One chunk in its own consistent snapshot, as raw rows."""
    table, source = work.table, work.source
    shape = table.shape
    now_ms = int(datetime.now(UTC).timestamp() * 1000)

    def changes() -> Iterator[tuple[Any, Any, Any]]:
        import pymysql

        conn = server.connect(source, autocommit=False)
        copies: dict[str, int] = {}
        try:
            position = snapshot_position(conn, source.kind)
            env = Envelope(f"{source.kind}-bootstrap", now_ms, source.data_center)
            ref = position.ref_key(work.generation)
            sql, params = _select(table, chunk)
            with conn.cursor(pymysql.cursors.SSDictCursor) as cur:
                cur.execute(sql, params)
                for ordinal, raw in enumerate(cur):
                    yield (snapshot_change(table, raw, ref, env, ordinal, copies),
                           (position.file, position.pos), env)
            conn.rollback()
        finally:
            conn.close()

    yield from published_rows(work.spec, source, work.registry, work.bootstrap_servers,
                              table.topic, table.encoder, shape.key.columns, shape.qualified,
                              chunk, now_ms, changes(), ROWS_PER_BATCH)


def chunk_count_rows(conn: Any, table: TappedTable) -> int:
    """The table's row count as the server estimates it (for the ETA; not exact)."""
    with conn.cursor() as cur:
        cur.execute("SELECT table_rows FROM information_schema.tables "
                    "WHERE table_schema = %s AND table_name = %s",
                    (table.shape.db, table.shape.table))
        row = cur.fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def work(prepared: Any, source: SourceConfig, spec: ReadSpec, bootstrap_servers: str
         ) -> BulkRead:
    return BulkRead(source, prepared.table, spec, str(prepared.root), bootstrap_servers,
                    prepared.generation)


def jvm_frame(spark: Any, source: SourceConfig, prepared: Any, spec: ReadSpec,
              chunks: list[Chunk]) -> Any:
    """A wave's chunks as one Spark JDBC read (jdbc_read.py)."""
    return chunk_frame(spark, JdbcRead(source, prepared.table, spec, prepared.generation,
                                       spec.ingested_at_us // 1000), chunks)


ROAD = Road(prepare, chunk_bounds, chunk_count_rows, work, read_one, jvm_unfit, jvm_frame)
