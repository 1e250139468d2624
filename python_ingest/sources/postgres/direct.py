"""The direct bootstrap's PostgreSQL side (issue #62; the command: steps/bootstrap.py).

    prepare   the server checked, the publication made, the table's shape registered, its
              topics made, the tap's checkpoint store locked (the tap must be stopped, as for
              the Kafka road: snapshot.py), and a snapshot exported by a replication slot:
              the tap's own slot when it has none yet (its consistent point is then where the
              tap starts, saved as its checkpoint at once), else a TEMPORARY slot. The
              exporting connection stays open and idle until the bootstrap ends.
    chunks    key-ordered ranges of the table's primary or unique key (index-only probes),
              not ctid ranges: a row keeps its key across snapshots, not its ctid, and a
              resumed bootstrap reads its other chunks under a newer snapshot.
    read      each chunk by a Spark task (``read_one``, ``mapInArrow``): its own
              connection, ``SET TRANSACTION SNAPSHOT`` to the exported one, the rows as the
              Kafka road publishes them (``events.snapshot``, ``publish``) decoded by the
              ingestion's decoder, every row with the ref key ``(P << 18) - 1`` of the
              snapshot's consistent point ``P``: below every change streamed after ``P``,
              above every change committed before it.
    hand over the tap's checkpoint as the Kafka road writes it: the table's stop cleared, its
              relation recorded from the first run's ``P`` on.

Resume: a new process exports a new snapshot at ``P1 >= P``; the chunks still to land are
read at ``P1`` and ranked by it; the stream from the tap's checkpoint (at or before ``P``)
carries every change, and the merge ignores those a chunk already holds (ref keys decide).
A table without a key (full-row identity) is refused: its copies cannot be chunked by key.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from python_ingest.config import Settings, SourceConfig
from python_ingest.config.source_kinds import PostgresOptions
from python_ingest.exceptions import SluiceError, TapError
from python_ingest.kafka import broker as broker_mod
from python_ingest.sources.kafka.reader import ReadSpec
from python_ingest.sources.postgres import events, server
from python_ingest.sources.postgres.events import PgTable
from python_ingest.sources.postgres.position import (
    REF_SHIFT,
    PgCheckpointStore,
    lsn_text,
)
from python_ingest.sources.postgres.shapes import table_shape
from python_ingest.sources.postgres.snapshot import hand_over_checkpoint, locked_store
from python_ingest.sources.postgres.tap import SOURCE
from python_ingest.sources.tap.changes import Envelope
from python_ingest.sources.tap.chunks import (
    Chunk,
    Key,
    Road,
    chunkable,
    key_ranges,
    published_rows,
)
from python_ingest.sources.tap.core import registry_root, topic_for
from python_ingest.sources.tap.errors import check_topic_limit, error_topic
from python_ingest.sources.tap.producer import Encoder
from python_ingest.sources.tap.registry import ROW, Registry

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)
FETCH_ROWS = 5000  # rows per round trip of a chunk's server-side cursor


def _table(conn: Any, source: SourceConfig, schema: str, name: str, root: Path
           ) -> tuple[PgTable, str]:
    """The table as the tap publishes it, its shape registered, and its snapshot's SELECT
    list (snapshot.py's)."""
    registry = Registry(root / f"{schema}.{name}")
    latest = registry.latest()
    shape = table_shape(conn, source, schema, name, latest[1] if latest else None)
    schema_id = registry.register(shape.shape)
    return PgTable(shape.shape, schema_id, Encoder(schema_id, shape.shape.avro()),
                   topic_for(source, schema, name), shape.converters, shape.identity == "f",
                   None), shape.select_list()


@dataclass
class PgPrepared:
    """A PostgreSQL table ready for a direct bootstrap (what steps/bootstrap.py needs of a
    source: ``conn``, ``table``, ``root``, ``generation``, ``p0``, ``hand_over``, ``close``)."""

    conn: Any  # the server's text for every value (server.raw_text)
    store: PgCheckpointStore
    source: SourceConfig
    table: PgTable
    root: Path
    oid: int
    p0: int  # the first run's snapshot point: the relation is recorded from it on
    point: int  # this process's snapshot point, every row read now is ranked by it
    exported: str  # the snapshot's name, valid while ``repl`` stays open and idle
    repl: Any
    slot: dict[str, Any] | None  # the tap's slot before this process, None: created here
    select: str = ""
    p0_gtid: str | None = None  # binlog sources' only

    def hand_over(self) -> str:
        own = self.source.of(PostgresOptions).slot_name
        shape = self.table.shape
        start = hand_over_checkpoint(self.store, own, [(shape.db, shape.table)], self.p0,
                                     {shape.qualified: self.oid}, {}, False, self.slot)
        return f"the tap streams from {lsn_text(start)} (snapshot at {lsn_text(self.p0)})"

    def close(self) -> None:
        try:
            if self.repl is not None:
                self.repl.close()  # a temporary slot goes with it
        finally:
            self.conn.close()
            self.store.release()


def prepare(settings: Settings, source: SourceConfig, qualified: str) -> PgPrepared:
    """Check and register ``schema.table``, lock the tap's checkpoint store and export a
    snapshot (the module doc). ``close`` it when done."""
    schema, _, name = qualified.partition(".")
    if not name:
        raise SluiceError(f"name the table as <schema>.<table>, got {qualified!r}")
    store = locked_store(settings, source)
    conn = repl = None
    try:
        conn = server.connect(source)
        server.check_server(conn, source)
        tapped = server.tables(conn, source)
        if (schema, name) not in tapped:
            raise TapError(f"{qualified} is not a table source {source.name} taps (its "
                           "include/exclude, or no such table in database "
                           f"{source.of(PostgresOptions).database})")
        server.ensure_publication(conn, source)
        server.raw_text(conn)
        root = registry_root(settings, source)
        table, select = _table(conn, source, schema, name, root)
        if table.shape.key.kind == ROW or not table.shape.key.columns:
            raise SluiceError(f"{qualified} has no primary or unique key over NOT NULL "
                              f"columns ({table.shape.key.why}): a direct bootstrap reads key "
                              "ranges; bootstrap it through Kafka (without --direct)")
        bootstrap_servers = settings.broker.bootstrap_servers
        broker_mod.ensure_topic(bootstrap_servers, table.topic, source.partitions)
        check_topic_limit(bootstrap_servers, table.topic)
        broker_mod.ensure_topic(bootstrap_servers, error_topic(source), source.partitions)
        own = source.of(PostgresOptions).slot_name
        slot = server.slot_info(conn, own)
        checkpoint = store.load()
        if slot is None and checkpoint is not None and checkpoint.slot == own \
                and tapped != [(schema, name)]:
            raise TapError(f"the slot {own} of source {source.name} is gone: the changes of "
                           "every table since the checkpoint are lost, so bootstrap them all: "
                           f"`sluice bootstrap {source.name} all`")
        repl = server.replication_connect(source)
        slot_name = own if slot is None else f"{own}_direct_{os.getpid()}"
        point, exported = server.create_slot(repl, slot_name, export=True,
                                             temporary=slot is not None)
        assert exported is not None
        oid = server.table_oid(conn, schema, name)
        if slot is None:  # the tap's slot starts at the snapshot: so does its checkpoint
            hand_over_checkpoint(store, own, [(schema, name)], point, {qualified: oid}, {},
                                 True, None)
    except BaseException:
        if repl is not None:
            repl.close()
        if conn is not None:
            conn.close()
        store.release()
        raise
    return PgPrepared(conn, store, source, table, root, oid, point, point, exported, repl,
                      slot, select)


def _quote(column: str) -> str:
    return '"{}"'.format(column.replace('"', '""'))


def chunk_bounds(conn: Any, shape: Any, chunk_rows: int, first_rows: int | None = None
                 ) -> list[Chunk]:
    """Key-ordered chunks of about ``chunk_rows`` rows each (index-only probes on the key's
    index; the key values as the server's text), the first of ``first_rows`` when given; one
    chunk when the key may be NULL (tap/chunks.py ``chunkable``)."""
    if not chunkable(shape):
        return [Chunk(0, None, None)]
    cols = ", ".join(_quote(c) for c in shape.key.columns)
    table = server.quoted(shape.db, shape.table)

    def probe(after: Key | None, size: int) -> tuple[str, list[Any]]:
        where, params = ("", []) if after is None else (f"WHERE ({cols}) > %s", [after])
        return (f"SELECT {cols} FROM {table} {where} ORDER BY {cols} "
                f"LIMIT 1 OFFSET {size - 1}", params)

    with conn.cursor() as cur:
        return key_ranges(cur, probe, chunk_rows, first_rows)


def chunk_predicate(columns: tuple[str, ...], chunk: Chunk) -> tuple[str, list[Any]]:
    """``after < (key) <= upto`` as a row comparison (the key's index serves it); the bounds
    are the server's text, typed by the columns they meet."""
    cols = ", ".join(_quote(c) for c in columns)
    where, params = ["TRUE"], []
    if chunk.after is not None:
        where.append(f"({cols}) > %s")
        params.append(tuple(chunk.after))
    if chunk.upto is not None:
        where.append(f"({cols}) <= %s")
        params.append(tuple(chunk.upto))
    return " AND ".join(where), params


def estimate(conn: Any, table: PgTable) -> int:
    """The table's row count as the planner estimates it (the ETA only)."""
    found = server.rows(conn, "SELECT GREATEST(reltuples, 0)::bigint FROM pg_class "
                              "WHERE oid = %s::regclass",
                        (server.quoted(table.shape.db, table.shape.table),))
    return int(found[0][0]) if found else 0


def jvm_unfit(_source: SourceConfig, _table: PgTable, _conn: Any) -> str:
    return "PostgreSQL: the tap's own value conversion"


@dataclass(frozen=True)
class PgBulkRead:
    """What a Spark task needs to read chunks into raw rows (pickled to the executors)."""

    source: SourceConfig
    table: PgTable
    select: str
    spec: ReadSpec
    registry: str
    bootstrap_servers: str
    snapshot: str
    point: int


def work(prepared: PgPrepared, source: SourceConfig, spec: ReadSpec, bootstrap_servers: str
         ) -> PgBulkRead:
    return PgBulkRead(source, prepared.table, prepared.select, spec,
                      str(prepared.root), bootstrap_servers, prepared.exported, prepared.point)


def read_one(job: PgBulkRead, chunk: Chunk) -> Iterator[pa.RecordBatch]:
    """One chunk under the exported snapshot, as raw rows."""
    table, source = job.table, job.source
    shape = table.shape
    now_ms = int(datetime.now(UTC).timestamp() * 1000)

    def changes() -> Iterator[tuple[Any, Any, Any]]:
        ref = (job.point << REF_SHIFT) - 1
        env = Envelope(f"{SOURCE}-bootstrap", now_ms, source.data_center)
        conn = server.connect(source)
        try:
            server.raw_text(conn)
            conn.autocommit = False
            with conn.cursor() as cur:
                cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                try:
                    cur.execute("SET TRANSACTION SNAPSHOT %s", (job.snapshot,))
                except Exception as exc:
                    raise SluiceError(f"bootstrap of {shape.qualified}: the exported snapshot "
                                      f"{job.snapshot} is gone ({str(exc).strip()}): the "
                                      "bootstrap's driver ended; run the same command again, "
                                      "it resumes by chunk") from exc
            where, params = chunk_predicate(shape.key.columns, chunk)
            copies: dict[str, int] = {}
            with conn.cursor(name=f"sluice_chunk_{chunk.index}") as cur:
                cur.itersize = FETCH_ROWS
                cur.execute(f"SELECT {job.select} FROM {server.quoted(shape.db, shape.table)} "
                            f"WHERE {where}", params)
                for ordinal, texts in enumerate(cur):
                    yield events.snapshot(table, list(texts), ref, env, ordinal, copies), None, env
            conn.rollback()
        finally:
            conn.close()

    yield from published_rows(job.spec, source, job.registry, job.bootstrap_servers,
                              table.topic, table.encoder, shape.key.columns, shape.qualified,
                              chunk, now_ms, changes(), FETCH_ROWS * 4)


ROAD = Road(prepare, chunk_bounds, estimate, work, read_one, jvm_unfit)
