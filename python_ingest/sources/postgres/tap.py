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
positions on its own), and a thread keeps the connection alive while the tap is busy. A
kill -9 anywhere therefore resends from the last confirmed LSN: delivery is at least once,
and the ref keys (commit LSN, then the change's position in its transaction, position.py)
make the repeats harmless to the merge.

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
import time
from typing import Any

from python_ingest.exceptions import TapError
from python_ingest.sources.postgres import events, partitions, pgoutput, publication, server
from python_ingest.sources.postgres.events import PgTable
from python_ingest.sources.postgres.position import (
    MAX_CHANGES,
    as_position,
    lsn_text,
    ref_key,
)
from python_ingest.sources.postgres.slot import start_position
from python_ingest.sources.postgres.status import unused_slots, unused_warning
from python_ingest.sources.postgres.tap_checkpoints import TapCheckpoints
from python_ingest.sources.postgres.tap_state import SOURCE as SOURCE
from python_ingest.sources.postgres.tap_tables import TapTables
from python_ingest.sources.postgres.wire import ReplicationStream
from python_ingest.sources.tap import keys
from python_ingest.sources.tap.changes import Envelope
from python_ingest.sources.tap.core import TapStats
from python_ingest.sources.tap.encoder import envelope_tail
from python_ingest.sources.tap.producer import BarrierProducer
from python_ingest.sources.tap.registry import CHANGELOG

log = logging.getLogger(__name__)

_U32 = struct.Struct(">I")
_DELETE, _NEW = 68, 78  # 'D'; 'N': a new tuple follows
_ROW_CHANGES = frozenset(b"IUD")  # Insert, Update, Delete
# what a malformed message raises in pgoutput.py (UnicodeDecodeError is a ValueError)
_MALFORMED = (ValueError, IndexError, struct.error)


class PgTap(TapTables, TapCheckpoints):
    """Reads one PostgreSQL source's slot and publishes its tapped tables' changes (its state:
    tap_state.py; tables: tap_tables.py; checkpoints: tap_checkpoints.py)."""

    # ---- public (run: tap/core.py) -----------------------------------------------------

    def _close(self) -> None:
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
                     self.pg.publication_name)
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
        producer = BarrierProducer(self.settings.broker.bootstrap_servers)
        self._produce = producer.produce
        self._start_producing(producer)
        server.wait_inactive(self._conn, self.source)  # a tap killed just now: its walsender
        self._repl = server.replication_connect(self.source)
        self._cursor = cur = self._repl.cursor()
        import psycopg2

        try:
            options = {"proto_version": "1", "publication_names": self.pg.publication_name}
            if self.pg.streaming:
                options.update(proto_version="2", streaming="on")
            if self._conn.server_version >= 140000:  # partitions.py's logical messages
                options["messages"] = "true"
            cur.start_replication(slot_name=self.pg.slot_name, decode=False,
                                  start_lsn=start, status_interval=self.source.heartbeat_s * 5,
                                  options=options)
        except psycopg2.Error as exc:
            raise TapError(f"source {self.source.name}: cannot stream from the slot "
                           f"{self.pg.slot_name}: {str(exc).strip()} (another tap may be "
                           "reading it)") from exc
        # from here on the tap alone reads the stream and says what the server may drop
        self._stream = stream = ReplicationStream(
            self._repl, start, server.keepalive_interval(self._conn, self.source.heartbeat_s))
        log.info("tapping source %s from %s (slot %s, publication %s) into topics "
                 "%s.<schema>.<table>", self.source.name, lsn_text(start), self.pg.slot_name,
                 self.pg.publication_name, self.source.topic_base)
        last_ask = 0.0
        read = self._streamed if self.pg.streaming else self._message
        while not self.stop.is_set():
            try:
                payloads = stream.read_batch()  # all that is waiting: one call, not one each
            except TapError as exc:
                raise TapError(f"source {self.source.name}: the replication stream failed "
                               f"after {lsn_text(self._saved)}: {exc}") from exc
            if payloads:
                stats = self.stats
                for n, payload in enumerate(payloads, 1):
                    stats.events += 1
                    read(payload)
                    if self._commit_lsn == 0:
                        self._maybe_save()
                        if self.stop.is_set():  # at a transaction's end, not the batch's: the
                            self._unread = n < len(payloads)  # rest comes again from the
                            break  # checkpoint, which must not pass it (_finish_idle)
                self._follow_publication()  # (every second or so: publication.py)
                continue
            self._idle()
            self._follow_publication()
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

    # ---- messages ---------------------------------------------------------------------

    def _message(self, payload: bytes) -> None:
        """One message of protocol version 1: a row change by fastpath.py when it can, else
        decoded and handled in full."""
        tag = payload[0] if len(payload) > 6 else 0  # (shorter: decode says why)
        if tag in _ROW_CHANGES and self._commit_lsn:
            fast = self._fast.get(_U32.unpack_from(payload, 1)[0])
            # an update with an old tuple ('K': its key changed; 'O': REPLICA IDENTITY FULL)
            # takes the general path
            if fast is not None and (payload[5] == _NEW) != (tag == _DELETE):
                index = self._index
                if index >= MAX_CHANGES:
                    ref_key(self._commit_lsn, index)  # raises, saying why
                found = fast.encode(payload, 6, self._refs.base + index,  # the ref key
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
        try:
            msg = pgoutput.decode(payload)
        except _MALFORMED as exc:
            raise self._malformed(payload, exc) from exc
        self._handle(msg)

    def _streamed(self, payload: bytes) -> None:
        """Protocol 2: large transactions held until they commit (streams.py)."""
        try:
            found = self.streams.read(payload)
        except _MALFORMED as exc:
            raise self._malformed(payload, exc) from exc
        for msg in found:
            self._handle(msg)

    def _malformed(self, payload: bytes, exc: Exception) -> TapError:
        """A message pgoutput.py cannot read (no server sends one): the tap stops, saying
        where, before anything of it is published or confirmed."""
        where = f"in the transaction committed at {lsn_text(self._commit_lsn)}" \
            if self._commit_lsn else f"after {lsn_text(self._seen_end())}"
        return TapError(
            f"source {self.source.name}: a replication message {where} cannot be read "
            f"({type(exc).__name__}: {exc}; {len(payload)} bytes, starting "
            f"{payload[:24].hex()}). Nothing of it was published and the checkpoint stays at "
            f"{lsn_text(self._saved)}: report it with the tap's log "
            "(docs/postgres-source.md, \"What each failure looks like\")")

    def _handle(self, msg: Any) -> None:
        kind = type(msg)
        if kind is pgoutput.Insert or kind is pgoutput.Delete:
            table = self._tapped(msg.relation)
            if table is not None:
                change = events.insert(table, msg.new, self._next_ref(), self._env) \
                    if kind is pgoutput.Insert else \
                    events.delete(table, msg.old, self._next_ref(), self._env)
                self._publish(table, [change])
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
            if msg.prefix == publication.PREFIX:
                self._published(msg)
            else:
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

    def _publish(self, table: PgTable, changes: list[Any]) -> None:
        self.stats.row_changes += 1
        self._publish_changes(table, changes, (lsn_text(self._commit_lsn), self._index),
                              self._env)

    def _commit(self, msg: pgoutput.Commit) -> None:
        assert self.producer is not None
        self.producer.serve()
        self.stats.transactions += 1
        self._pending.append((msg.end_lsn, self.rows.take_delta()))
        self._commit_lsn = 0
