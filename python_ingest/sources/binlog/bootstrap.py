"""Bootstrap (DBEvents): publish a table's current rows as a snapshot, then hand over to the tap.

The table is cut into key-ordered chunks (``bootstrap_chunk_rows`` keys each; boundaries found
with index-only ``LIMIT 1 OFFSET n`` probes), read by ``bootstrap_workers`` processes. Each
chunk is read in its own consistent-snapshot transaction and its rows get, as ref key, the
binlog position ``P_i`` of that snapshot, exactly (MariaDB reports it in
``binlog_snapshot_file``/``binlog_snapshot_position``; on MySQL it is read under a brief
``FLUSH TABLES WITH READ LOCK`` while the snapshot starts).

Hand-over: before any chunk starts, the current binlog position ``P0`` (<= every ``P_i``) is
noted, and the tap's checkpoint is set to ``P0`` when the tap has none or is further on. The tap
then publishes every change after ``P0``; changes between ``P0`` and ``P_i`` that a chunk
already holds carry ref keys below ``P_i`` and the merge ignores them (ref keys decide, not
arrival order), changes after ``P_i`` are newer and apply. So no change is lost, and none is
applied twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import UTC, datetime
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from python_ingest.config import Settings, SourceConfig
from python_ingest.exceptions import SluiceError
from python_ingest.kafka import broker as broker_mod
from python_ingest.sources.binlog import server
from python_ingest.sources.binlog.columns import select_sql
from python_ingest.sources.binlog.events import Envelope, TappedTable, snapshot_change
from python_ingest.sources.binlog.identity import (
    ServerIdentity,
    binlog_state,
    by_gtid,
    foreign_server,
    identify,
    start_gtid,
)
from python_ingest.sources.binlog.position import (
    BinlogCheckpoint,
    BinlogCheckpointStore,
    BinlogPosition,
)
from python_ingest.sources.tap import keys
from python_ingest.sources.tap.chunks import Chunk, Key, chunkable, key_ranges
from python_ingest.sources.tap.core import registry_root, topic_for
from python_ingest.sources.tap.errors import ErrorSink, check_topic_limit, error_topic, publish
from python_ingest.sources.tap.producer import ChangelogProducer, Encoder
from python_ingest.sources.tap.registry import ROW, Registry, TableShape

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BootstrapResult:
    table: str
    rows: int
    chunks: int
    seconds: float
    handover: BinlogPosition
    schema_id: int

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0


def _greater(columns: tuple[str, ...], key: Key) -> tuple[str, list[Any]]:
    """SQL for ``(columns) > key`` written out so every engine can use the primary key."""
    terms, params = [], []
    for i, column in enumerate(columns):
        parts = [f"{server.quote(c)} = %s" for c in columns[:i]] + [f"{server.quote(column)} > %s"]
        terms.append("(" + " AND ".join(parts) + ")")
        params += list(key[: i + 1])
    return "(" + " OR ".join(terms) + ")", params


def chunk_bounds(conn: Any, shape: TableShape, chunk_rows: int,
                 first_rows: int | None = None) -> list[Chunk]:
    """Key-ordered chunks of about ``chunk_rows`` rows each (index-only probes), the first of
    ``first_rows`` when given; one chunk for a table without key columns (full-row identity,
    changelog) or whose key may be NULL (``key_columns`` naming a nullable column)."""
    if not chunkable(shape):
        return [Chunk(0, None, None)]
    key = shape.key.columns
    cols = ", ".join(server.quote(c) for c in key)
    table = f"{server.quote(shape.db)}.{server.quote(shape.table)}"

    def probe(after: Key | None, size: int) -> tuple[str, list[Any]]:
        where, params = ("1=1", []) if after is None else _greater(key, after)
        return (f"SELECT {cols} FROM {table} WHERE {where} ORDER BY {cols} "
                f"LIMIT 1 OFFSET {size - 1}", params)

    with conn.cursor() as cur:
        return key_ranges(cur, probe, chunk_rows, first_rows)


# ---- one chunk, in a worker process -------------------------------------------------------

_worker: dict[str, Any] = {}

# A test seam (issue #9.6): called in the reading process right before a chunk's snapshot is
# taken, so a test can commit a change at exactly that moment.
BEFORE_SNAPSHOT: list[Callable[[], None]] = []


def _snapshot_position(conn: Any, kind: str) -> BinlogPosition:
    """Start a consistent snapshot and return the binlog position it holds exactly: every
    transaction before the position is in the snapshot, none after it (issue #9.6).

    MariaDB reports that position inside the snapshot's transaction
    (``binlog_snapshot_file``/``binlog_snapshot_position``). MySQL does not, and a position
    read before or after ``START TRANSACTION`` can miss or repeat a commit made in between:
    there a brief global read lock (``FLUSH TABLES WITH READ LOCK``, as mysqldump
    --single-transaction --master-data does; needs RELOAD) holds commits while the snapshot
    starts and the position is read."""
    import pymysql

    for hook in BEFORE_SNAPSHOT:
        hook()
    with conn.cursor() as cur:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        if kind == "mariadb":
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
            cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
            status = {str(k).lower(): str(v) for k, v in cur.fetchall()}
            if status.get("binlog_snapshot_file"):
                return BinlogPosition(status["binlog_snapshot_file"],
                                      int(status["binlog_snapshot_position"]))
            conn.rollback()  # not reported: take it under the read lock instead
        try:
            cur.execute("FLUSH TABLES WITH READ LOCK")
        except pymysql.err.OperationalError as exc:
            raise SluiceError(
                f"bootstrap needs a brief global read lock to take a snapshot at an exact "
                f"binlog position on this server ({exc.args[-1]}): GRANT RELOAD ON *.* to the "
                "source's user (docs/binlog-tap.md)") from exc
        try:
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
            return server.master_position(conn)
        finally:
            cur.execute("UNLOCK TABLES")  # the transaction and its snapshot stay


def chunk_predicate(primary_key: tuple[str, ...], chunk: Chunk) -> tuple[str, list[Any]]:
    """SQL condition (and its parameters) selecting the rows of ``chunk``: after < key <= upto."""
    where, params = ["1=1"], []
    if chunk.after is not None:
        sql, p = _greater(primary_key, chunk.after)
        where.append(sql)
        params += p
    if chunk.upto is not None:
        sql, p = _greater(primary_key, chunk.upto)
        where.append(f"NOT {sql}")
        params += p
    return " AND ".join(where), params


def read_chunk(source: SourceConfig, bootstrap: str, table: TappedTable, chunk: Chunk,
               registry: str | None = None, generation: int = 0
               ) -> tuple[int, str, int, dict[str, int]]:
    """Publish one chunk's rows; returns (rows, snapshot file, snapshot position, copies per
    row digest of a full-row-identity table). Error records go to the source's error topic
    when ``registry`` (the source's registry root) is given; ``generation``: the failover
    generation of the tap's ref keys on this server (position.py)."""
    import pymysql

    if "producer" not in _worker:
        _worker["producer"] = ChangelogProducer(bootstrap, linger_ms=20)
    producer: ChangelogProducer = _worker["producer"]
    sink = ErrorSink(producer, source, Path(registry)) if registry else None
    conn = server.connect(source, autocommit=False)
    shape = table.shape
    cols = ", ".join(select_sql(c, server.quote(c.name)) for c in shape.columns)
    name = f"{server.quote(shape.db)}.{server.quote(shape.table)}"
    order = (" ORDER BY " + ", ".join(f"{name}.{server.quote(c)}" for c in shape.key.columns)
             if shape.key.columns else "")  # the columns, not the SELECT's aliases
    where, params = chunk_predicate(shape.key.columns, chunk)
    rows = 0
    copies: dict[str, int] = {}
    try:
        position = _snapshot_position(conn, source.kind)
        env = Envelope(f"{source.kind}-bootstrap", int(datetime.now(UTC).timestamp() * 1000),
                       source.data_center)
        ref = position.ref_key(generation)
        with conn.cursor(pymysql.cursors.SSDictCursor) as cur:
            cur.execute(f"SELECT {cols} FROM {name} WHERE {where}{order}", params)
            for raw in cur:
                change = snapshot_change(table, raw, ref, env, rows, copies)
                publish(producer, table.topic, table.encoder, change, shape.key.columns, sink,
                        shape.qualified, (position.file, position.pos), env)
                rows += 1
                if rows % 5000 == 0:
                    producer.poll()
        conn.rollback()
    finally:
        conn.close()
    producer.flush()
    return rows, position.file, position.pos, copies


# ---- the command --------------------------------------------------------------------------


def _hand_over(store: BinlogCheckpointStore, locked: bool, qualified: str,
               p0: BinlogPosition, copies: tuple[BinlogPosition, dict[str, int]] | None = None,
               p0_gtid: str | None = None, server_identity: dict[str, Any] | None = None) -> str:
    """Point the tap at ``p0`` unless it already starts earlier; returns what happened.
    ``copies``: a full-row-identity table's snapshot position and copies per row digest, which
    the tap continues from (it skips the table's changes up to that position). ``p0_gtid``,
    ``server_identity``: recorded with a checkpoint at ``p0`` (identity.py)."""
    checkpoint = store.load()
    if not locked:
        if checkpoint is not None and qualified in checkpoint.stopped:
            raise SluiceError(f"the tap stopped {qualified} and is running now: stop it "
                              "(SIGTERM), then run the bootstrap again to hand over")
        return (f"the tap is running and keeps its own position; it publishes {qualified}'s "
                "changes after the snapshot (ref keys order them)")
    stopped = dict(checkpoint.stopped) if checkpoint else {}
    stopped.pop(qualified, None)
    rows = dict(checkpoint.rows) if checkpoint else {}
    if copies is not None:
        since, counts = copies
        rows[qualified] = {"since": {"file": since.file, "pos": since.pos},
                           "counts": dict(sorted(counts.items()))}
    generation = checkpoint.generation if checkpoint else 0  # of this server's ref keys
    if checkpoint is None or checkpoint.position > p0:
        # no ``existence`` (existence.py): which tables exist at p0 is unknown, the safe answer
        store.save(BinlogCheckpoint(p0, p0_gtid, stopped, rows, server_identity, generation))
        return f"the tap's checkpoint is now {p0}: it continues from the snapshot"
    if stopped != checkpoint.stopped or rows != checkpoint.rows:
        store.save(BinlogCheckpoint(checkpoint.position, checkpoint.gtid, stopped, rows,
                                    checkpoint.server or server_identity, generation,
                                    checkpoint.existence))
    return f"the tap's checkpoint {checkpoint.position} is before the snapshot: it stays"


@dataclass
class Prepared:
    """A table checked and registered for a bootstrap, the tap's checkpoint store locked when
    free, and the hand-over position ``p0`` noted (what every bootstrap road starts with)."""

    conn: Any
    store: BinlogCheckpointStore
    locked: bool
    identity: ServerIdentity
    generation: int
    root: Path
    table: TappedTable
    p0: BinlogPosition
    p0_gtid: str | None

    def hand_over(self, copies: tuple[BinlogPosition, dict[str, int]] | None = None) -> str:
        shape = self.table.shape
        return _hand_over(self.store, self.locked, shape.qualified, self.p0,
                          copies if shape.key.kind == ROW else None, self.p0_gtid,
                          self.identity.to_json())

    def close(self) -> None:
        self.store.release()
        self.conn.close()


def prepare(settings: Settings, source: SourceConfig, qualified: str) -> Prepared:
    """Check ``db.table`` and the server, register the table's shape, make sure of its topics,
    lock the tap's checkpoint store (a tap starting now waits for the hand-over) and note
    ``P0`` (saved as the tap's checkpoint when it has none). ``close`` it when done."""
    if "." not in qualified:
        raise SluiceError(f"name the table as <database>.<table>, got {qualified!r}")
    db, name = qualified.split(".", 1)
    if not server.included(source, db, name):
        raise SluiceError(f"{qualified} is not tapped by source '{source.name}' (include "
                          f"{list(source.include)}, exclude {list(source.exclude)})")
    conn = server.connect(source)
    store = BinlogCheckpointStore(settings.path(settings.state_dir), source.name)
    locked = store.try_lock()  # held while we work: a tap starting now waits for the hand-over
    try:
        server.check_server(conn, source)
        keys.check_setting(source)
        identity = identify(conn)
        existing = store.load()
        if existing is not None:  # a checkpoint of another server: start over first
            _check_server(conn, source, existing, identity, store.path)
        generation = existing.generation if existing is not None else 0
        root = registry_root(settings, source)
        latest = Registry(root / qualified).latest()
        shape = server.table_shape(conn, db, name, source, latest and latest[1])
        if shape.key.kind == ROW and not locked:
            raise SluiceError(f"{qualified} has a full-row identity ({shape.key.why}): its "
                              "bootstrap hands the copies of each row over to the tap, so stop "
                              "the tap (SIGTERM) first and start it again afterwards")
        schema_id = Registry(root / qualified).register(shape)
        topic = topic_for(source, db, name)
        bootstrap_servers = settings.broker.bootstrap_servers
        broker_mod.ensure_topic(bootstrap_servers, topic, source.partitions)
        check_topic_limit(bootstrap_servers, topic)  # fails before publishing, naming the fix
        broker_mod.ensure_topic(bootstrap_servers, error_topic(source), source.partitions)
        table = TappedTable(shape, schema_id, Encoder(schema_id, shape.avro()), topic)
        p0 = server.master_position(conn)
        p0_gtid = start_gtid(conn, p0)
        if locked and store.load() is None:  # so a tap started after us cannot skip P0..now
            store.save(BinlogCheckpoint(p0, p0_gtid, server=identity.to_json()))
    except BaseException:
        store.release()
        conn.close()
        raise
    return Prepared(conn, store, locked, identity, generation, root, table, p0, p0_gtid)


def bootstrap(settings: Settings, source: SourceConfig, qualified: str,
              workers: int | None = None, chunk_rows: int | None = None,
              progress: Callable[[str], None] = print) -> BootstrapResult:
    """Snapshot ``db.table`` of ``source`` into its topic and hand over to the tap."""
    workers = workers or source.bootstrap_workers
    chunk_rows = chunk_rows or source.bootstrap_chunk_rows
    started = time.monotonic()
    prepared = prepare(settings, source, qualified)
    conn, table, p0, generation = prepared.conn, prepared.table, prepared.p0, prepared.generation
    shape, schema_id, topic, root = table.shape, table.schema_id, table.topic, prepared.root
    bootstrap_servers = settings.broker.bootstrap_servers
    try:
        chunks = chunk_bounds(conn, shape, chunk_rows)
        progress(f"bootstrap {qualified}: {len(chunks)} chunks of up to {chunk_rows} rows, "
                 f"{workers} workers, schema version {schema_id}, topic {topic}, from {p0}")
        rows = 0
        done = 0
        last_report = time.monotonic()
        copies: tuple[BinlogPosition, dict[str, int]] | None = None
        if workers == 1 or len(chunks) == 1:
            results = (read_chunk(source, bootstrap_servers, table, c, str(root), generation)
                       for c in chunks)
            for count, file, pos, counted in results:
                rows, done = rows + count, done + 1
                copies = (BinlogPosition(file, pos), counted)
                last_report = _report(progress, qualified, done, len(chunks), rows, started,
                                      last_report)
            _worker.pop("producer", None)  # read in this process: its producer is done
        else:
            with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
                futures = [pool.submit(read_chunk, source, bootstrap_servers, table, c, str(root),
                                       generation) for c in chunks]
                for future in as_completed(futures):
                    count, _f, _p, _c = future.result()
                    rows, done = rows + count, done + 1
                    last_report = _report(progress, qualified, done, len(chunks), rows,
                                          started, last_report)
        handover = prepared.hand_over(copies)
    finally:
        prepared.close()
    seconds = time.monotonic() - started
    progress(f"bootstrap {qualified}: {rows} rows in {seconds:.1f}s "
             f"({rows / seconds if seconds else 0:.0f} rows/s); {handover}")
    return BootstrapResult(qualified, rows, len(chunks), seconds, p0, schema_id)


def _check_server(conn: Any, source: SourceConfig, checkpoint: BinlogCheckpoint,
                  identity: ServerIdentity, checkpoint_path: Path) -> None:
    """Refuse a tap checkpoint of another server: its positions (the hand-over compares them
    with this server's) mean nothing here. After a failover the tap moves it first."""
    where = f"{source.host}:{source.port}"
    state = binlog_state(conn) if by_gtid(checkpoint, identity) else None
    error = foreign_server(source.name, where, checkpoint, identity, checkpoint_path, state)
    if error is not None:
        raise error
    if checkpoint.server is not None and ServerIdentity.from_json(checkpoint.server) != identity:
        raise SluiceError(f"source {source.name}: the tap's checkpoint {checkpoint_path} is "
                          f"still on the server it was written against ({checkpoint.server}); "
                          f"the server at {where} ({identity}) holds its GTID "
                          f"{checkpoint.gtid}, so the tap fails over to it: start the tap "
                          f"(`sluice tap {source.name}`) so it moves its checkpoint here, then "
                          "run the bootstrap")


def snapshot_position(conn: Any, kind: str) -> BinlogPosition:
    """``_snapshot_position``, for the other bootstrap road (bulk_read.py)."""
    return _snapshot_position(conn, kind)


def _report(progress: Callable[[str], None], qualified: str, done: int, total: int, rows: int,
            started: float, last: float) -> float:
    now = time.monotonic()
    if now - last < 2 and done != total:
        return last
    elapsed = now - started
    filled = 24 * done // total if total else 24
    left = f"ETA {(total - done) * elapsed / done:.0f}s" if done and done < total else "done"
    progress(f"bootstrap {qualified}: [{'#' * filled}{'-' * (24 - filled)}] {done}/{total} "
             f"chunks, {rows} rows, {rows / elapsed if elapsed else 0:.0f} rows/s, {left}"
             + ("..." if done < total else ""))
    return now
