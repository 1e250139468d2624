"""The consistent snapshot (``sluice bootstrap`` of a PostgreSQL source): copy tables under
the snapshot a replication slot exports, then stream from the slot's consistent point.

1. The publication is created first (pgoutput looks tables up in it as of each change).
2. When the source's slot does not exist yet, it is created with ``EXPORT_SNAPSHOT``: the
   snapshot holds exactly the transactions committed before the slot's consistent point
   ``P``, and the slot streams exactly those committed after it. When the slot exists (the tap
   ran before), a TEMPORARY slot exports the snapshot and its own ``P``; the tap's stream then
   carries on from its checkpoint, which lies before ``P``.
3. Each table is copied in chunks of pages (``ctid`` ranges, a TID range scan: no ordering,
   no index needed, keyless tables alike) by ``bootstrap_workers`` connections that each
   ``SET TRANSACTION SNAPSHOT`` to the exported one: no lock beyond ACCESS SHARE, writers go
   on. Every snapshot row gets the ref key ``(P << 18) - 1`` (position.py): below every
   change the stream sends after ``P``, above every change committed before it (which the
   snapshot already holds: the merge ignores those when they arrive again).
4. Once Kafka acknowledged every row, the tap's checkpoint is written: the new slot's ``P``,
   the tables' stops cleared, the copies of full-row-identity tables with ``P`` as the point
   up to which their changes are in the snapshot. The tap must not run meanwhile (the lock).

The exporting replication connection stays open, idle, until every worker has set the
snapshot (PostgreSQL drops an exported snapshot when its connection runs anything else).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from python_ingest.config import Settings, SourceConfig
from python_ingest.config.source_kinds import PostgresOptions
from python_ingest.exceptions import TapError
from python_ingest.kafka import broker as broker_mod
from python_ingest.sources.postgres import events, server, tables
from python_ingest.sources.postgres.events import PgTable
from python_ingest.sources.postgres.position import (
    REF_SHIFT,
    PgCheckpoint,
    PgCheckpointStore,
    as_position,
    lsn_text,
)
from python_ingest.sources.postgres.shapes import table_shape
from python_ingest.sources.postgres.tap import SOURCE
from python_ingest.sources.tap import keys
from python_ingest.sources.tap.changes import Envelope
from python_ingest.sources.tap.core import registry_root, topic_for
from python_ingest.sources.tap.errors import ErrorSink, check_topic_limit, error_topic, publish
from python_ingest.sources.tap.producer import ChangelogProducer, Encoder
from python_ingest.sources.tap.registry import ROW, Registry

log = logging.getLogger(__name__)
PAGES_PER_CHUNK_MIN = 8


@dataclass
class SnapshotResult:
    point: int  # the consistent point (LSN)
    rows: dict[str, int] = field(default_factory=dict)  # table → rows published
    seconds: float = 0.0
    new_slot: bool = False
    copies: dict[str, dict[str, int]] = field(default_factory=dict)  # full-row identities
    oids: dict[str, int] = field(default_factory=dict)  # table → its relation oid

    @property
    def total(self) -> int:
        return sum(self.rows.values())


def _tables(conn: Any, source: SourceConfig, spec: str) -> list[tuple[str, str]]:
    tapped = server.tables(conn, source)
    if spec.strip() == "all":
        return tapped
    wanted = []
    for item in spec.split(","):
        schema, _, table = item.strip().partition(".")
        if not table:
            raise TapError(f"'{item}' is not <schema>.<table>")
        if (schema, table) not in tapped:
            raise TapError(f"{schema}.{table} is not a table source {source.name} taps (its "
                           "include/exclude, or no such table in database "
                           f"{source.of(PostgresOptions).database})")
        wanted.append((schema, table))
    return wanted


def _snapshot_conn(source: SourceConfig, snapshot: str) -> Any:
    conn = server.connect(source)
    server.raw_text(conn)
    conn.autocommit = False
    with conn.cursor() as cur:
        cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot,))
    return conn


def bootstrap_tables(settings: Settings, source: SourceConfig, spec: str,
                     workers: int | None = None, chunk_rows: int | None = None,
                     progress: Callable[[str], None] | None = None) -> SnapshotResult:
    """Publish a consistent snapshot of the tables ``spec`` names (``schema.table`` joined by
    commas, or ``all``) and hand over to the tap (see the module doc)."""
    say = progress or (lambda line: None)
    workers = workers or source.bootstrap_workers
    chunk_rows = chunk_rows or source.bootstrap_chunk_rows
    store = locked_store(settings, source)
    conn = server.connect(source)
    repl = None
    try:
        server.check_server(conn, source)
        wanted = _tables(conn, source, spec)
        server.ensure_publication(conn, source)
        checkpoint = store.load()
        own_slot = source.of(PostgresOptions).slot_name
        slot = server.slot_info(conn, own_slot)
        new_slot = slot is None
        if new_slot and checkpoint is not None and checkpoint.slot == own_slot and \
                set(wanted) != set(server.tables(conn, source)):
            raise TapError(f"the slot {own_slot} of source {source.name} is gone: the "
                           "changes of every table since the checkpoint are lost, so bootstrap "
                           f"them all: `sluice bootstrap {source.name} all`")
        repl = server.replication_connect(source)
        name = own_slot if new_slot else f"{own_slot}_snap_{os.getpid()}"
        point, exported = server.create_slot(repl, name, export=True, temporary=not new_slot)
        assert exported is not None
        say(f"snapshot {exported} at {lsn_text(point)} "
            f"({'new slot ' + name if new_slot else 'temporary slot'})")
        result = _copy(settings, source, wanted, exported, point, workers, chunk_rows, say)
        result.new_slot = new_slot
        # hand over: the tap's checkpoint (the tap is not running: the lock)
        start = hand_over_checkpoint(store, own_slot, wanted, point, result.oids, result.copies,
                                     new_slot, slot)
        say(f"snapshot of {len(wanted)} table(s) published: {result.total} rows in "
            f"{result.seconds:.1f}s; the tap streams from {lsn_text(start)}")
        return result
    finally:
        if repl is not None:
            repl.close()  # a temporary slot goes with it
        conn.close()
        store.release()


def locked_store(settings: Settings, source: SourceConfig) -> PgCheckpointStore:
    """The source's key settings checked and the tap's checkpoint store locked for a
    bootstrap (``release`` it when done); an error saying to stop the tap while it runs."""
    keys.check_setting(source)
    store = PgCheckpointStore(settings.path(settings.state_dir), source.name)
    if not store.try_lock():
        raise TapError(f"the tap of source '{source.name}' is running (lock "
                       f"{store.lock_path}): stop it during the bootstrap; it resumes after, "
                       "from where the bootstrap hands over (docs/postgres-source.md)")
    return store


def hand_over_checkpoint(store: PgCheckpointStore, own_slot: str, wanted: list[tuple[str, str]],
                         point: int, oids: dict[str, int], copies: dict[str, dict[str, int]],
                         new_slot: bool, slot: dict[str, Any] | None) -> int:
    """Write the tap's checkpoint after a snapshot at ``point`` of the ``wanted`` tables (the
    store locked: the tap is not running); returns the LSN the tap streams from. ``new_slot``:
    the tap's slot was created by the snapshot (the checkpoint starts over at ``point``);
    ``slot``: the tap's slot as it was before, when it existed. ``copies``: the row copies
    of full-row-identity tables."""
    old = None if new_slot else store.load()
    stopped = dict(old.stopped) if old is not None else {}
    rows = keys.RowCounts(old.rows if old is not None else None)
    relations = dict(old.relations) if old is not None else {}
    for schema, table in wanted:
        qualified = f"{schema}.{table}"
        stopped.pop(qualified, None)
        # the lake's rows are this table's from P on (an older table of the name, in the
        # stream before P, is left out: tables.py)
        relations[qualified] = tables.snapshot_entry(oids[qualified], point)
        if qualified in copies:
            rows.reset(qualified, copies[qualified], as_position(point))
    start = point if old is None else old.lsn
    if old is None and slot is not None:
        start = slot["confirmed_flush"] or point
    store.save(PgCheckpoint(start, own_slot, stopped, rows.to_json(as_position(start)),
                            relations, gone=dict(old.gone) if old is not None else {}))
    return start


def _copy(settings: Settings, source: SourceConfig, wanted: list[tuple[str, str]],
          exported: str, point: int, workers: int, chunk_rows: int,
          say: Callable[[str], None]) -> SnapshotResult:
    started = time.monotonic()
    bootstrap = settings.broker.bootstrap_servers
    producer = ChangelogProducer(bootstrap)
    root = registry_root(settings, source)
    broker_mod.ensure_topic(bootstrap, error_topic(source), source.partitions)
    errors = ErrorSink(producer, source, root)
    ref = (point << REF_SHIFT) - 1
    result = SnapshotResult(point)
    conns = [_snapshot_conn(source, exported) for _ in range(max(1, workers))]
    pool = threading.local()
    free = list(conns)
    lock = threading.Lock()
    try:
        plans: list[tuple[PgTable, str, int, int]] = []  # (table, select, first page, pages)
        main = conns[0]
        for schema, name in wanted:
            registry = Registry(root / f"{schema}.{name}")
            latest = registry.latest()
            shape = table_shape(main, source, schema, name, latest[1] if latest else None)
            schema_id = registry.register(shape.shape)
            topic = topic_for(source, schema, name)
            broker_mod.ensure_topic(bootstrap, topic, source.partitions)
            check_topic_limit(bootstrap, topic)
            table = PgTable(shape.shape, schema_id, Encoder(schema_id, shape.shape.avro()),
                            topic, shape.converters, shape.identity == "f",
                            keys.RowCounts() if shape.shape.key.kind == ROW else None)
            select = f"SELECT {shape.select_list()} FROM {server.quoted(schema, name)}"
            pages, kind, width = server.rows(
                main, "SELECT pg_relation_size(c.oid) / current_setting('block_size')::int, "
                      "c.relkind, GREATEST(c.reltuples / GREATEST(c.relpages, 1), 1) "
                      "FROM pg_class c WHERE c.oid = %s::regclass",
                (server.quoted(schema, name),))[0]
            result.rows[f"{schema}.{name}"] = 0
            result.oids[f"{schema}.{name}"] = server.table_oid(main, schema, name)
            if kind != "r" or shape.shape.key.kind == ROW:  # partitioned, or counted copies
                plans.append((table, select, 0, -1))  # one scan, in this order
                continue
            step = max(PAGES_PER_CHUNK_MIN, int(chunk_rows / float(width)))
            plans.extend((table, select, first, step) for first in range(0, int(pages) + 1,
                                                                          step))

        copies: dict[str, dict[str, int]] = {}
        ordinals: dict[str, int] = {}

        def run(plan: tuple[PgTable, str, int, int]) -> int:
            table, select, first, step = plan
            if not hasattr(pool, "conn"):
                with lock:
                    pool.conn = free.pop()
            sql = select if step < 0 else (
                f"{select} WHERE ctid >= '({first},0)'::tid AND ctid < '({first + step},0)'::tid")
            env = Envelope(SOURCE, int(time.time() * 1000), source.data_center)
            qualified = table.shape.qualified
            count = 0
            with pool.conn.cursor() as cur:
                cur.execute(sql)
                while batch := cur.fetchmany(2000):
                    with lock:  # one producer; the copies of full-row identities
                        mine = copies.setdefault(qualified, {})
                        ordinal = ordinals.get(qualified, 0)
                        for texts in batch:
                            change = events.snapshot(table, list(texts), ref, env, ordinal, mine)
                            ordinal += 1
                            count += 1
                            publish(producer, table.topic, table.encoder, change,
                                    table.shape.key.columns, errors, qualified, None, env)
                        ordinals[qualified] = ordinal
                        producer.poll()
            with lock:
                result.rows[qualified] += count
            return count

        with ThreadPoolExecutor(max_workers=len(conns)) as executor:
            done = 0
            for count in executor.map(run, plans):
                done += count
                if done and done % (chunk_rows * 10) < count:
                    say(f"  {done} rows published")
        producer.flush()
        result.copies = {p[0].shape.qualified: copies.get(p[0].shape.qualified, {})
                         for p in plans if p[0].shape.key.kind == ROW}
    finally:
        for conn in conns:
            conn.rollback()
            conn.close()
    result.seconds = time.monotonic() - started
    for qualified, count in sorted(result.rows.items()):
        say(f"{qualified}: {count} rows")
    return result
