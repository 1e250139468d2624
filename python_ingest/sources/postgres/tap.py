"""The PostgreSQL tap's main loop: pgoutput → changelog events → Kafka, checkpointed at
transaction ends, the slot confirmed only behind the checkpoint.

The tap reads the source's logical replication slot (created when missing, with the
publication) with psycopg2's LogicalReplicationConnection, protocol version 1: the server
sends each committed transaction whole, in commit order (Begin, Relation when a table is first
seen or changed, Insert/Update/Delete/Truncate, Commit). A transaction's end LSN becomes the
checkpoint once the broker has acknowledged every event produced before it; the checkpoint
file is written first and only then is the LSN confirmed to the server (flush), which lets it
drop the WAL before it. Nothing else confirms anything: once streaming, the tap reads the
stream and answers the server's keepalives itself (wire.py; psycopg2's reader confirmed
positions on its own), and a thread keeps the connection alive while the tap is busy. A kill -9 anywhere therefore resends from the last confirmed LSN:
delivery is at least once, and the ref keys (commit LSN, then the change's position in its
transaction, position.py) make the repeats harmless to the merge.

The common row changes take fastpath.py (bytes in, key and Avro message out). The broker
reports only failed deliveries (BarrierProducer): a checkpoint flushes the producer first, so
every message queued before it is acknowledged, then saves the last transaction's end LSN.

When the slot has nothing for the tapped tables (an idle source, or WAL of other databases) the
server's keepalives carry its WAL end; with no transaction open and every event acknowledged,
that becomes the checkpoint too, so an idle tap does not hold WAL back.
"""

from __future__ import annotations

import logging
import select
import struct
import threading
import time
from collections import deque
from typing import Any

from python_ingest.config import Settings, SourceConfig
from python_ingest.exceptions import (
    IncompatibleSchemaChange,
    SluiceError,
    TapError,
    UnsupportedColumn,
)
from python_ingest.kafka import broker as broker_mod
from python_ingest.sources.binlog import ddl, keys
from python_ingest.sources.binlog.errors import ErrorSink, check_topic_limit, error_topic, publish
from python_ingest.sources.binlog.events import Envelope
from python_ingest.sources.binlog.producer import BarrierProducer, Encoder
from python_ingest.sources.binlog.registry import CHANGELOG, ROW, Registry, registered_key
from python_ingest.sources.binlog.tap import TapStats, registry_root
from python_ingest.sources.postgres import events, partitions, pgoutput, server, tables
from python_ingest.sources.postgres.events import PgTable
from python_ingest.sources.postgres.fastpath import FastTable, RefKeys, envelope_tail
from python_ingest.sources.postgres.moves import RowReader
from python_ingest.sources.postgres.position import (
    MAX_CHANGES,
    PgCheckpoint,
    PgCheckpointStore,
    as_position,
    lsn_text,
    ref_key,
)
from python_ingest.sources.postgres.shapes import catalog_relation, relation_shape
from python_ingest.sources.postgres.slot import start_position
from python_ingest.sources.postgres.status import unused_slots, unused_warning
from python_ingest.sources.postgres.streams import HeldStreams
from python_ingest.sources.postgres.wire import ReplicationStream

log = logging.getLogger(__name__)

SOURCE = "postgres"  # the events' _source
_U32 = struct.Struct(">I")
_DELETE, _NEW = 68, 78  # 'D'; 'N': a new tuple follows
_ROW_CHANGES = frozenset(b"IUD")  # Insert, Update, Delete


def topic_for(source: SourceConfig, schema: str, table: str) -> str:
    return f"{source.topic_base}.{schema}.{table}"


class PgTap:
    """Reads one PostgreSQL source's slot and publishes its tapped tables' changes."""

    def __init__(self, settings: Settings, source: SourceConfig,
                 stop: threading.Event | None = None) -> None:
        self.settings = settings
        self.source = source
        self.stop = stop or threading.Event()
        self.store = PgCheckpointStore(settings.path(settings.state_dir), source.name)
        self.registry_root = registry_root(settings, source)
        self.stats = TapStats()
        self.relations: dict[int, pgoutput.Relation] = {}
        self.tables: dict[int, PgTable | None] = {}  # None: not tapped (excluded or stopped)
        self._fast: dict[int, FastTable] = {}  # the tapped tables fastpath.py can publish
        self._tails = (b"", b"")  # the envelope after _ref_key in this transaction (fastpath)
        self._signatures: dict[int, tuple[Any, ...]] = {}
        self.stopped: dict[str, dict[str, Any]] = {}
        self.rows = keys.RowCounts()
        self._pending: deque[tuple[int, Any]] = deque()  # (end LSN, row counts) not saved
        self._rows_changed: dict[str, set[str]] = {}  # digests whose saved count changed
        self._saved = 0
        self._confirmed = 0
        self._last_save = 0.0
        self._last_idle_save = 0.0
        self._commit_lsn = 0  # of the transaction being read (0: none open)
        self._commit_ms = 0
        self._index = 0  # the next change's position in it
        self._refs = RefKeys()  # its ref keys' Avro bytes (fastpath)
        self.streams = HeldStreams()  # protocol 2: streamed transactions not committed yet
        self.streamed = self.streams.counts  # streamed transactions committed and aborted
        self._known_topics: set[str] = set()
        self._conn: Any = None
        self._repl: Any = None
        self._reader = RowReader(lambda: server.connect(self.source))  # moves.py
        self._oids: dict[str, dict[str, Any]] = {}  # table → its relation oid (tables.py)
        self._slow: set[int] = set()  # tables off the fast path while they have gone keys
        self._gone: dict[str, set[str]] = {}  # table → its gone keys (moves.py), checkpointed
        self._cursor: Any = None
        self._stream: ReplicationStream | None = None  # read and confirmed by the tap (wire.py)
        self.producer: BarrierProducer | None = None
        self._produce: Any = None  # the producer's produce(topic, value, key)
        self.errors: ErrorSink | None = None

    # ---- public -----------------------------------------------------------------------

    def run(self, until_end: bool = False) -> TapStats:
        """Tap until stopped or, with ``until_end``, until the WAL's end when it started."""
        if not self.store.try_lock():
            raise TapError(f"another tap (or bootstrap) of source '{self.source.name}' is "
                           f"running (lock {self.store.lock_path}); run one per source")
        try:
            return self._run(until_end)
        finally:
            self.store.release()
            if self._stream is not None:
                self._stream.close()  # its keepalive thread, before the connection goes
            for conn in (self._repl, self._conn):
                if conn is not None:
                    conn.close()
            self._reader.close()
            self.producer = self.errors = None  # the Kafka client goes now, not with the tap

    # ---- start ------------------------------------------------------------------------

    def _run(self, until_end: bool) -> TapStats:
        keys.check_setting(self.source)
        self._conn = server.connect(self.source)
        server.check_server(self._conn, self.source)
        refused = [t for t in server.without_identity(self._conn, self.source)
                   if keys.configured(self.source, t) != CHANGELOG]
        if refused:
            raise TapError(f"source {self.source.name}: "
                           + "; ".join(server.no_identity_error(self.source, t) for t in refused))
        if server.ensure_publication(self._conn, self.source):
            log.info("source %s: created the publication %s", self.source.name,
                     self.source.publication_name)
        partitions.guard(self._conn, self.source)  # TRUNCATE of one partition (partitions.py)
        start, checkpoint = start_position(self._conn, self.source, self.store)
        for slot in unused_slots(self._conn, self.settings, self.source):  # a removed source's
            log.warning("source %s: %s", self.source.name, unused_warning(slot))
        if checkpoint is not None:
            self.stopped = dict(checkpoint.stopped)
            self.rows = keys.RowCounts(checkpoint.rows)
            self._oids = dict(checkpoint.relations)
            self._gone = {q: set(k) for q, k in checkpoint.gone.items()}
        self._saved = self._confirmed = start
        target = server.current_lsn(self._conn) if until_end else None
        self.producer = BarrierProducer(self.settings.broker.bootstrap_servers)
        self._produce = self.producer.produce
        broker_mod.ensure_topic(self.settings.broker.bootstrap_servers, error_topic(self.source),
                                self.source.partitions)
        self.errors = ErrorSink(self.producer, self.source, self.registry_root)
        server.wait_inactive(self._conn, self.source)  # a tap killed just now: its walsender
        self._repl = server.replication_connect(self.source)
        self._cursor = cur = self._repl.cursor()
        import psycopg2

        try:
            options = {"proto_version": "1", "publication_names": self.source.publication_name}
            if self.source.streaming:
                options.update(proto_version="2", streaming="on")
            if self._conn.server_version >= 140000:  # partitions.py's logical messages
                options["messages"] = "true"
            cur.start_replication(slot_name=self.source.slot_name, decode=False,
                                  start_lsn=start, status_interval=self.source.heartbeat_s * 5,
                                  options=options)
        except psycopg2.Error as exc:
            raise TapError(f"source {self.source.name}: cannot stream from the slot "
                           f"{self.source.slot_name}: {str(exc).strip()} (another tap may be "
                           "reading it)") from exc
        # from here on the tap alone reads the stream and says what the server may drop
        self._stream = stream = ReplicationStream(
            self._repl, start, server.keepalive_interval(self._conn, self.source.heartbeat_s))
        log.info("tapping source %s from %s (slot %s, publication %s) into topics "
                 "%s.<schema>.<table>", self.source.name, lsn_text(start), self.source.slot_name,
                 self.source.publication_name, self.source.topic_base)
        last_ask = 0.0
        read = self._streamed if self.source.streaming else self._message
        while not self.stop.is_set():
            try:
                payload = stream.read()
            except TapError as exc:
                raise TapError(f"source {self.source.name}: the replication stream failed "
                               f"after {lsn_text(self._saved)}: {exc}") from exc
            if payload is not None:
                self.stats.events += 1
                read(payload)
                if self._commit_lsn == 0:
                    self._maybe_save()
                continue
            self._idle()
            if target is not None and self._commit_lsn == 0 and \
                    max(self._seen_end(), stream.wal_end) >= target:
                break
            now = time.monotonic()
            if now - last_ask > (0.1 if target is not None else self.source.heartbeat_s):
                stream.ask()  # a keepalive with the server's WAL end (_idle)
                last_ask = now
            select.select([cur], [], [], 0.1 if target is not None
                          else min(self.source.heartbeat_s, 1.0))
        self._finish()
        return self.stats

    def _seen_end(self) -> int:
        return self._pending[-1][0] if self._pending else self._saved

    # ---- messages ---------------------------------------------------------------------

    def _message(self, payload: bytes) -> None:
        """One message of protocol version 1: a row change by fastpath.py when it can, else
        decoded and handled in full."""
        tag = payload[0]
        if tag in _ROW_CHANGES and self._commit_lsn:
            fast = self._fast.get(_U32.unpack_from(payload, 1)[0])
            # an update with an old tuple ('K': its key changed; 'O': REPLICA IDENTITY FULL)
            # takes the general path
            if fast is not None and (payload[5] == _NEW) != (tag == _DELETE):
                index = self._index
                if index >= MAX_CHANGES:
                    ref_key(self._commit_lsn, index)  # raises, saying why
                found = fast.encode(payload, 6, self._refs.encode(index),
                                    self._tails[tag == _DELETE])
                if found is not None:
                    self._index = index + 1
                    self.stats.row_changes += 1
                    self.stats.messages += 1
                    try:
                        self._produce(fast.topic, found[1], found[0])
                    except BufferError:  # the client's queue is full: wait for room
                        self.producer.send(fast.topic, *found)  # type: ignore[union-attr]
                    return
        self._handle(pgoutput.decode(payload))

    def _streamed(self, payload: bytes) -> None:
        """Protocol 2: large transactions held until they commit (streams.py)."""
        for msg in self.streams.read(payload):
            self._handle(msg)

    def _handle(self, msg: Any) -> None:
        kind = type(msg)
        if kind is pgoutput.Insert:
            table = self._tapped(msg.relation)
            if table is not None:
                self._publish(table, [events.insert(table, msg.new, self._next_ref(), self._env)])
                if msg.relation in self._slow:
                    self._fast_path(msg.relation, table)
        elif kind is pgoutput.Update:
            table = self._tapped(msg.relation)
            if table is not None:
                filled = None
                if msg.old_is_key and pgoutput.UNCHANGED in msg.new:  # a key change (moves.py)
                    filled = self._reader.fill(self.relations[msg.relation], msg.new, msg.old)
                found = events.update(table, msg.old, msg.new, self._ref(), self._env, filled)
                self._index += max(len(found), 1)
                self._publish(table, found)
                if table.gone or msg.relation in self._slow:
                    self._fast_path(msg.relation, table)
        elif kind is pgoutput.Delete:
            table = self._tapped(msg.relation)
            if table is not None:
                self._publish(table, [events.delete(table, msg.old, self._next_ref(), self._env)])
                if msg.relation in self._slow:
                    self._fast_path(msg.relation, table)
        elif kind is pgoutput.Begin:
            self._commit_lsn, self._commit_ms, self._index = msg.final_lsn, msg.commit_ms, 0
            self._refs.begin(ref_key(msg.final_lsn, 0))  # (raises past the ref keys' bounds)
            self._env = Envelope(SOURCE, msg.commit_ms, self.source.data_center)
            self._tails = (envelope_tail(SOURCE, msg.commit_ms, self.source.data_center, False),
                           envelope_tail(SOURCE, msg.commit_ms, self.source.data_center, True))
        elif kind is pgoutput.Commit:
            self._commit(msg)
        elif kind is pgoutput.Relation:
            self._relation(msg)
        elif kind is pgoutput.Truncate:
            self._truncated = (self.stats.events, set(msg.relations))
            for oid in msg.relations:
                self._truncate(oid)
        elif kind is pgoutput.Message:
            self._partition_truncate(msg)

    def _tapped(self, oid: int) -> PgTable | None:
        """The table of a row change, None when it is not published (not tapped, stopped, or
        the change is in the table's snapshot already: full-row identities)."""
        if oid not in self.tables:
            raise self._unknown(oid)
        table = self.tables[oid]
        # in the snapshot taken at P: committed before P (a commit record starting at P is
        # streamed, not in the snapshot), hence + 1 (skip compares "at or before")
        if table is not None and table.rows is not None and \
                self.rows.skip(table.shape.qualified, as_position(self._commit_lsn + 1)):
            self._index += 1
            return None
        return table

    def _unknown(self, oid: int) -> TapError:
        """A change of a relation whose Relation message (its shape) never came: stop, the
        checkpoint where it is (before this transaction), rather than skip the change."""
        name = "a relation gone since"
        try:
            found = server.rows(self._conn, "SELECT %s::regclass::text", (oid,))
            name = f"now {found[0][0]}" if found and found[0][0] != str(oid) else name
        except Exception:  # noqa: BLE001 - only for the message; the error is raised anyway
            pass
        return TapError(
            f"source {self.source.name}: a change of relation oid {oid} ({name}) in the "
            f"transaction committed at {lsn_text(self._commit_lsn)} came before any Relation "
            "message describing it, so the tap cannot tell which table it is. It stopped "
            f"without moving its checkpoint ({lsn_text(self._saved)}): restart the tap (the "
            "server sends the table's Relation message again on a new connection); if this "
            "repeats, report it with the tap's log (docs/postgres-source.md)")

    def _ref(self) -> int:
        return ref_key(self._commit_lsn, self._index)

    def _next_ref(self) -> int:
        ref = ref_key(self._commit_lsn, self._index)
        self._index += 1
        return ref

    _env = Envelope(SOURCE, 0, None)

    def _publish(self, table: PgTable, changes: list[Any]) -> None:
        assert self.producer is not None and self.errors is not None
        qualified = table.shape.qualified
        self.stats.row_changes += 1
        reported = self.errors.reported
        where = (lsn_text(self._commit_lsn), self._index)
        for change in changes:
            if publish(self.producer, table.topic, table.encoder, change,
                       table.shape.key.columns, self.errors, qualified, where, self._env):
                self.stats.messages += 1
        self.stats.errors += self.errors.reported - reported

    def _commit(self, msg: pgoutput.Commit) -> None:
        assert self.producer is not None
        self.producer.serve()
        self.stats.transactions += 1
        self._pending.append((msg.end_lsn, self.rows.take_delta()))
        self._commit_lsn = 0

    # ---- tables -----------------------------------------------------------------------

    def _relation(self, rel: pgoutput.Relation) -> None:
        """A table's (new) shape: registered as a new schema version when its columns changed."""
        self.relations[rel.oid] = rel
        qualified = rel.qualified
        if not server.included(self.source, rel.namespace, rel.name) or \
                qualified in self.stopped:
            self._set_table(rel.oid, None)
            return
        partitions.guard(self._conn, self.source, rel.oid)  # a partition created since
        signature = (rel.namespace, rel.name, rel.identity, rel.columns)
        if self._signatures.get(rel.oid) == signature and rel.oid in self.tables:
            return
        replaced = self._replaced(rel)
        if replaced is None:
            self._set_table(rel.oid, None)  # an older table of the name, before a bootstrap
            return
        try:
            table = self._register(rel)
        except (IncompatibleSchemaChange, UnsupportedColumn, SluiceError) as exc:
            self._stop_table(qualified, replaced + str(exc))
            self._set_table(rel.oid, None)
            return
        table.gone = self._gone.setdefault(qualified, set())  # kept across versions
        self._set_table(rel.oid, table)
        self._signatures[rel.oid] = signature

    def _replaced(self, rel: pgoutput.Relation) -> str | None:
        """Follows which table (relation oid) a name stands for, in stream order
        (tables.py); None when the Relation is of an older table of the name whose changes
        the table's snapshot already holds; else what to say if the shape cannot be taken."""
        verdict, why = tables.follow(self._oids, rel, self._commit_lsn)
        if verdict == tables.OLDER:
            return None
        if verdict in (tables.RECREATED, tables.RENAMED):
            qualified = rel.qualified
            log.warning("source %s: %s", self.source.name, why)
            self._gone.pop(qualified, None)  # the old table's
            if not self._delete_all(qualified, why):
                return None
            if verdict == tables.RECREATED and not tables.joins_at_create(
                    self._conn, self.source.publication_name, rel.namespace):
                self._stop_table(qualified, why + f"; the publication "
                                 f"{self.source.publication_name} took the new table in after "
                                 "its CREATE, so its first rows are not in the stream: "
                                 f"bootstrap it: `sluice bootstrap {self.source.name} "
                                 f"{qualified}`")
                return None
            if verdict == tables.RENAMED:
                self._stop_table(qualified, why + ": its rows are not in the stream; bootstrap "
                                 f"it: `sluice bootstrap {self.source.name} {qualified}` "
                                 "(when its columns or key differ from the lake table's, start "
                                 "the table over first: docs/postgres-source.md, \"Tables "
                                 "dropped, created again or renamed\")")
                return None
            return why + "; "
        return ""

    def _delete_all(self, qualified: str, why: str) -> bool:
        """A delete of every row live in the table's topic (as TRUNCATE), with the next ref
        key; False when they cannot be known (the table is stopped)."""
        versions = Registry(self.registry_root / qualified).versions()
        if not versions or registered_key(versions[max(versions)]).kind == CHANGELOG:
            return True
        assert self.producer is not None
        schema, _, name = qualified.partition(".")
        published = ddl.truncate(self.producer, self.settings.broker.bootstrap_servers,
                                 topic_for(self.source, schema, name), versions,
                                 self._next_ref(), self._env)
        if isinstance(published, str):
            self._stop_table(qualified, f"{why}: {published}")
            return False
        self.stats.messages += published
        self.rows.clear(qualified)
        log.info("source %s: %s: published %d deletes", self.source.name, why, published)
        return True

    def _fast_path(self, oid: int, table: PgTable) -> None:
        """Off while the table has gone keys (moves.py: the fast path does not track them),
        back on after."""
        if table.gone:
            self._slow.add(oid)
            self._fast.pop(oid, None)
        else:
            self._slow.discard(oid)
            self._set_table(oid, table)

    def _set_table(self, oid: int, table: PgTable | None) -> None:
        self.tables[oid] = table
        fast = FastTable.of(table) if table is not None and not table.gone else None
        if table is not None and table.gone:
            self._slow.add(oid)
        if fast is None:
            self._fast.pop(oid, None)
        else:
            self._fast[oid] = fast

    def _register(self, rel: pgoutput.Relation) -> PgTable:
        registry = Registry(self.registry_root / rel.qualified)
        latest = registry.latest()
        found = relation_shape(self._conn, self.source, rel, latest[1] if latest else None)
        previous = latest[0] if latest else None
        schema_id = registry.register(found.shape)
        if previous is not None and schema_id != previous:
            log.info("table %s: columns added or widened, new schema version %d",
                     rel.qualified, schema_id)
        elif previous is None:
            log.info("table %s: keyed by %s (%s)", rel.qualified, found.shape.key.describe(),
                     found.shape.key.why)
        topic = topic_for(self.source, rel.namespace, rel.name)
        if topic not in self._known_topics:
            bootstrap = self.settings.broker.bootstrap_servers
            broker_mod.ensure_topic(bootstrap, topic, self.source.partitions)
            check_topic_limit(bootstrap, topic)
            self._known_topics.add(topic)
        return PgTable(found.shape, schema_id, Encoder(schema_id, found.shape.avro()), topic,
                       found.converters, found.identity == "f",
                       self.rows if found.shape.key.kind == ROW else None)

    def _truncate(self, oid: int) -> None:
        """A delete for every row the table's topic holds live (binlog/ddl.py), with the
        TRUNCATE's ref key."""
        if oid not in self.tables:
            raise self._unknown(oid)
        table = self.tables[oid]
        if table is None:
            return
        qualified = table.shape.qualified
        if table.shape.key.kind == CHANGELOG:
            return  # an append-only changelog keeps every change
        assert self.producer is not None
        published = ddl.truncate(self.producer, self.settings.broker.bootstrap_servers,
                                 table.topic, Registry(self.registry_root / qualified).versions(),
                                 self._next_ref(), self._env)
        if isinstance(published, str):
            self._stop_table(qualified, f"TRUNCATE at {lsn_text(self._commit_lsn)}: {published}")
            self._set_table(oid, None)
            return
        self.stats.messages += published
        if table.rows is not None:
            self.rows.clear(qualified)
        log.info("source %s: TRUNCATE %s at %s: published %d deletes", self.source.name,
                 qualified, lsn_text(self._commit_lsn), published)

    _truncated: tuple[int, set[int]] = (-2, set())  # the last Truncate: (event, relations)

    def _partition_truncate(self, msg: pgoutput.Message) -> None:
        """A TRUNCATE of one partition (partitions.py): a delete of each of its live rows."""
        if msg.prefix != partitions.PREFIX or not msg.transactional or not self._commit_lsn:
            return
        found = partitions.parse(msg.content)
        if found["root"] not in self.tables:  # not described in this session yet
            rel = catalog_relation(self._conn, found["root"])
            if rel is not None:
                self._relation(rel)
        table = self.tables.get(found["root"])
        at, oids = self._truncated
        if found["root"] in oids and at >= self.stats.events - 1:
            self._truncated = (self.stats.events, oids)  # part of a TRUNCATE of the table
            return
        if table is None or table.shape.key.kind == CHANGELOG:
            return  # not tapped (or stopped); a changelog keeps every change
        assert self.producer is not None
        qualified = table.shape.qualified
        why = f"TRUNCATE of partition {found['partition']} at {lsn_text(self._commit_lsn)}"
        versions = Registry(self.registry_root / qualified).versions()
        ref = self._next_ref()
        self.producer.flush()  # every event published before it is in the topic
        live, problem = ddl.live_rows(self.settings.broker.bootstrap_servers, table.topic,
                                      versions, ref)
        keys_gone: list[bytes] = []
        if problem is None and live:
            try:
                keys_gone = partitions.members(self._conn, table.shape, found["root"], live,
                                               found["constraint"])
            except Exception as exc:  # psycopg2.Error: the table or its types are gone
                problem = (f"the server cannot tell its rows from the table's others "
                           f"({str(exc).strip()}). Start the table over (docs/binlog-tap.md, "
                           "\"Incompatible schema changes\") and bootstrap it")
        if problem is not None:
            self._stop_table(qualified, f"{why}: {problem}")
            self._set_table(found["root"], None)
            return
        self.stats.messages += partitions.publish_deletes(
            self.producer, table.topic, versions, live, keys_gone, ref, self._env)
        if table.rows is not None:
            for key in keys_gone:
                self.rows.remove(qualified, key.decode().rsplit("#", 1)[0])
        log.info("source %s: %s of %s: published %d deletes", self.source.name, why, qualified,
                 len(keys_gone))

    def _stop_table(self, qualified: str, reason: str) -> None:
        """Stop publishing one table (kept in the checkpoint; a bootstrap clears it)."""
        self.stopped[qualified] = {"lsn": lsn_text(self._commit_lsn or self._seen_end()),
                                   "error": reason}
        log.error("source %s: STOPPED table %s: %s", self.source.name, qualified, reason)

    # ---- checkpoints ------------------------------------------------------------------

    def _idle(self) -> None:
        """Nothing to read: save what is acknowledged; with nothing pending, the server's WAL
        end (from its keepalives) is a checkpoint too."""
        self._maybe_save()
        assert self.producer is not None
        assert self._stream is not None
        wal_end = self._stream.wal_end
        now = time.monotonic()
        if (self._commit_lsn == 0 and not self._pending and self.producer.queued() == 0
                and not self.streams.held  # (protocol 2) nothing streamed and uncommitted
                and wal_end > self._saved and
                now - self._last_idle_save >= self.source.checkpoint_interval_s):
            self._last_idle_save = now
            self._save(wal_end)

    def _maybe_save(self, force: bool = False) -> None:
        """Every checkpoint interval, between transactions: the producer's barrier (every
        message queued so far acknowledged, or BrokerError), then the last transaction read
        is the checkpoint."""
        assert self.producer is not None
        now = time.monotonic()
        if not force and now - self._last_save < self.source.checkpoint_interval_s:
            return
        self._last_save = now
        if not self._pending:
            self.producer.poll()  # failed deliveries (of error records) are raised here
            return
        self.producer.flush()
        safe: tuple[int, Any] | None = None
        while self._pending:
            safe = self._pending.popleft()
            self.rows.apply(safe[1])
            for table, changed in safe[1].items():  # for the row copies' log (rowlog.py)
                self._rows_changed.setdefault(table, set()).update(changed)
        if safe is not None and safe[0] > self._saved:
            self._save(safe[0])

    def _save(self, lsn: int) -> None:
        """Write the checkpoint, then confirm the LSN to the server (never the other way)."""
        rows, base = self._row_copies(lsn)
        self.store.save(PgCheckpoint(lsn, self.source.slot_name, dict(self.stopped), rows,
                                     dict(self._oids), base,
                                     {q: sorted(k) for q, k in self._gone.items() if k}))
        if base == lsn:
            self.store.row_log.settle(lsn)  # the checkpoint names the new base: the old goes
        self._saved = lsn
        self._last_save = time.monotonic()
        self.stats.checkpoints_saved += 1
        assert self._stream is not None
        self._stream.confirm(lsn)
        self._confirmed = lsn

    def _row_copies(self, lsn: int) -> tuple[dict[str, dict[str, Any]], int | None]:
        """The checkpoint's part of the full-row-identity tables' copies (rowlog.py): their
        snapshot marks, and the base their counts are in: a new one when due, else the last
        with a log line of the counts that changed since the previous checkpoint."""
        position = as_position(lsn)
        marks: dict[str, dict[str, Any]] = {
            t: {"since": {"file": s.file, "pos": s.pos}, "counts": {}}
            for t, s in self.rows.since.items() if s > position}
        row_log = self.store.row_log
        if not any(self.rows.saved.values()) and row_log.base_lsn is None:
            return marks, None  # no copies to keep
        changed = self._rows_changed
        self._rows_changed = {}
        if row_log.wants_base():
            row_log.write_base(lsn, {t: c for t, c in self.rows.saved.items() if c})
            return marks, lsn
        if changed:
            row_log.append(lsn, {t: {d: self.rows.saved.get(t, {}).get(d, 0) for d in digests}
                                 for t, digests in changed.items()})
        return marks, row_log.base_lsn

    def _finish(self) -> None:
        """Clean stop: every event produced is acknowledged, then the checkpoint is saved."""
        assert self.producer is not None
        self.producer.flush()
        self._maybe_save(force=True)
        self._last_idle_save = 0.0
        self._idle()  # the server's WAL end, when nothing is open
        log.info("tap of %s stopped cleanly at %s: %d row changes, %d messages, %d "
                 "transactions, %d error records", self.source.name, lsn_text(self._saved),
                 self.stats.row_changes, self.stats.messages, self.stats.transactions,
                 self.stats.errors)
