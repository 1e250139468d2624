"""The tap's main loop: binlog → changelog events → Kafka, checkpointed at transaction ends.

On the checkpoint's own server reading resumes by file/position (``is_mariadb=False`` with
``resume_stream=True``); onto another MariaDB server whose history holds the checkpoint's GTID
(a failover, identity.py, #35.8) by GTID (``is_mariadb=True`` with ``auto_position``). A
checkpoint is the position right after a transaction's commit (XID event, COMMIT query, or a
DDL statement, tap_ddl.py); it is saved only once the broker has acknowledged every event
produced before it, at most every ``checkpoint_interval_s`` and on a clean stop. A crash
therefore replays at most the transactions after the last saved checkpoint: delivery is at
least once, and the merge's ref-key ordering makes repeats harmless.

Where reading starts is tap_resume.py; a table's schema version, key and topic tap_tables.py;
what every tap does around its stream (the lock, the producer, the clean stop) tap/core.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any

from python_ingest.config import Settings, SourceConfig
from python_ingest.config.source_kinds import BinlogOptions
from python_ingest.exceptions import IncompatibleSchemaChange, PartialRowImage, TapError
from python_ingest.sources.binlog import (
    decoding,
    event_types,
    fastpath,
    gtid,
    server,
    statements,
    tap_ddl,
    tap_failover,
    tap_resume,
    tap_tables,
)
from python_ingest.sources.binlog.charsets import Charsets
from python_ingest.sources.binlog.events import TappedTable, changes, present
from python_ingest.sources.binlog.existence import Existence
from python_ingest.sources.binlog.position import (
    BinlogCheckpoint,
    BinlogCheckpointStore,
    BinlogPosition,
    ref_file_index,
)
from python_ingest.sources.binlog.xa import FL_PREPARED_XA, XaTransactions
from python_ingest.sources.tap import keys
from python_ingest.sources.tap.changes import DELETE, INSERT, UPDATE, Envelope
from python_ingest.sources.tap.core import TapCore, TapStats
from python_ingest.sources.tap.producer import ChangelogProducer
from python_ingest.sources.tap.registry import ROW

__all__ = ["Tap", "TapStats", "ends_transaction"]

log = logging.getLogger(__name__)


_INSIDE_TRANSACTION = ("BEGIN", "SAVEPOINT", "ROLLBACK TO", "RELEASE SAVEPOINT", "XA START",
                       "XA BEGIN", "XA END")


def ends_transaction(query: str) -> bool:
    """Whether a query event ends a transaction: COMMIT, ROLLBACK, XA COMMIT or a DDL
    statement (its own transaction), but not BEGIN, savepoints or a statement-format DML
    statement inside one (statements.py)."""
    text = " ".join(query.split()).upper()
    return not text.startswith(_INSIDE_TRANSACTION) and not statements.is_dml(query)


class Tap(TapCore):
    """Reads one source's binlog and publishes its tapped tables' changes."""

    store: BinlogCheckpointStore

    def __init__(self, settings: Settings, source: SourceConfig,
                 stop: threading.Event | None = None) -> None:
        super().__init__(settings, source,
                         BinlogCheckpointStore(settings.path(settings.state_dir), source.name),
                         stop)
        self.tables: dict[tuple[str, str], TappedTable] = {}
        self._signatures: dict[tuple[str, str], tuple[Any, ...]] = {}
        self._table_objs: dict[tuple[str, str], Any] = {}
        self.existence = Existence()  # of tables at the stream point read (existence.py)
        self.xa = XaTransactions()
        # per transaction end not yet checkpointed: (last message's sequence number, position,
        # GTID, full-row copies' delta, existence of tables there)
        self._pending: deque[tuple[int, BinlogPosition, str | None, Any, Existence]] = deque()
        self._last_end: BinlogPosition | None = None
        self._saved: BinlogPosition | None = None
        self._gtid: str | None = None  # MariaDB: the GTID position (every domain)
        self._server: dict[str, Any] | None = None  # identity.py: saved with each checkpoint
        self._resume_gtid: str | None = None  # identity.py: resume by GTID (else file/pos)
        self._failing_over = False  # till the first event read from the new server
        self._generation = 0  # of the ref keys (position.py): one more after each failover
        self._boundary: BinlogPosition | None = None  # the last GTID list event's position
        self._in_transaction = False  # between a MariaDB GTID event and its commit
        self._charsets: Charsets | None = None

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    # ---- the loop ---------------------------------------------------------------------

    def _run(self, until_end: bool) -> TapStats:
        from pymysqlreplication import BinLogStreamReader
        from pymysqlreplication.event import (
            GtidEvent,
            HeartbeatLogEvent,
            MariadbGtidEvent,
            MariadbGtidListEvent,
            QueryEvent,
            RotateEvent,
            XAPrepareEvent,
            XidEvent,
        )
        from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

        decoding.install()
        keys.check_setting(self.source)
        self._conn = server.connect(self.source)
        server.check_server(self._conn, self.source)
        self._charsets = Charsets(self._conn)
        start = tap_resume.start_position(self)
        self._saved = self._last_end = start
        self._start_producing(ChangelogProducer(self.settings.broker.bootstrap_servers))
        by_gtid = self._resume_gtid is not None
        log.info("tapping source %s from %s into topics %s.<db>.<table>", self.source.name,
                 f"GTID {self._resume_gtid}" if by_gtid else start, self.source.topic_base)
        stream = BinLogStreamReader(
            connection_settings=server.connection_settings(self.source),
            server_id=self.source.of(BinlogOptions).server_id, resume_stream=True,
            blocking=not until_end,
            log_file=start.file, log_pos=start.pos, is_mariadb=by_gtid,
            auto_position=self._resume_gtid,
            slave_heartbeat=self.source.heartbeat_s, ignored_schemas=list(server.SYSTEM_SCHEMAS),
            only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent, QueryEvent,
                         RotateEvent, HeartbeatLogEvent, MariadbGtidEvent, GtidEvent,
                         XAPrepareEvent, MariadbGtidListEvent, *event_types.extra_events()],
            filter_non_implemented_events=False,  # unknown types: stop, not skip (event_types)
            enable_logging=False)
        kinds = {WriteRowsEvent: INSERT, UpdateRowsEvent: UPDATE, DeleteRowsEvent: DELETE}
        extra = set(event_types.extra_events())
        file = start.file
        try:
            while not self.stop.is_set():
                try:
                    event = stream.fetchone()
                except Exception as exc:
                    raise tap_resume.stream_error(self, exc) from exc
                if event is None:  # until_end: the server reached the binlog's end
                    break
                self.stats.events += 1
                if self._failing_over and not isinstance(event, RotateEvent |
                                                         MariadbGtidListEvent):
                    tap_failover.failed_over(self)  # before anything of the new server is published
                kind = kinds.get(type(event))
                if kind is None and type(event) in extra:
                    self._unreadable(event, file)
                elif kind is not None:
                    if not self.xa.hold(event, kind, file):
                        self._rows(event, kind, file)
                elif isinstance(event, XidEvent):
                    self._commit(BinlogPosition(file, event.packet.log_pos))
                elif isinstance(event, QueryEvent):
                    self._xa_statement(event.query)
                    end = BinlogPosition(file, event.packet.log_pos)
                    if ends_transaction(event.query):
                        tap_ddl.apply(self, event, end)
                    tap_ddl.written_as_statement(self, event, end)  # rows not in the binlog
                    if ends_transaction(event.query):
                        self._commit(end)
                elif isinstance(event, XAPrepareEvent):
                    self._publish_held(self.xa.prepare(event.one_phase))
                    self._commit(BinlogPosition(file, event.packet.log_pos))
                elif isinstance(event, MariadbGtidEvent):
                    self._gtid = gtid.advance(self._gtid, event.gtid)
                    self._in_transaction = True
                    if event.flags & FL_PREPARED_XA:
                        assert self._last_end is not None
                        self.xa.begin(self._last_end)
                elif isinstance(event, GtidEvent):
                    self._gtid = event.gtid  # MySQL: resumes by file and position
                elif isinstance(event, MariadbGtidListEvent):
                    # at a binlog's start, and where a GTID start skipped to: a boundary
                    self._boundary = BinlogPosition(file, event.packet.log_pos)
                elif isinstance(event, RotateEvent):
                    if by_gtid and self._in_transaction:  # files hold whole transactions
                        tap_failover.reconnected(self)
                    file = event.next_binlog
                if by_gtid and not self._in_transaction:
                    stream.auto_position = self._gtid  # a reconnect goes on from here
                self._maybe_save()
        finally:
            stream.close()
        if self._failing_over:
            tap_failover.failed_over(self)  # the new server had nothing after the GTID yet
        self._finish()
        return self.stats

    def _unreadable(self, event: Any, file: str) -> None:
        """Stop at an event the tap cannot read (event_types.py), else skip it."""
        reason = event_types.unreadable(event)
        if reason is not None:
            raise TapError(f"source {self.source.name}: the binlog holds, at {file}:"
                           f"{event.packet.log_pos}, {reason}. The tap stops; its checkpoint "
                           f"stays at {self._where()}")

    def _xa_statement(self, query: str) -> None:
        """XA START holds row events (MySQL), XA COMMIT publishes, XA ROLLBACK drops (xa.py)."""
        assert self._last_end is not None
        committed = self.xa.statement(query, self._last_end)
        if committed is not None:
            xid, held = committed
            if held is None:
                log.error("source %s: XA COMMIT %s of a transaction prepared before the tap's "
                          "start: its row changes were not published; bootstrap the tables it "
                          "changed (docs/binlog-tap.md)", self.source.name, xid)
            self._publish_held(held)

    def _publish_held(self, held: Any) -> None:
        for event, kind, file in held.events if held is not None else ():
            self._rows(event, kind, file)


    def _commit(self, position: BinlogPosition) -> None:
        """A transaction ended at ``position``: a checkpoint once its events are acked."""
        assert self.producer is not None
        self.stats.transactions += 1
        self._in_transaction = False
        self._last_end = position
        self._pending.append((self.producer.acks.next_seq, position, self._gtid,
                              self.rows.take_delta(), self.existence))

    def _maybe_save(self, force: bool = False) -> None:
        assert self.producer is not None
        if not self._due(force):
            return
        self.producer.poll()
        done = self.producer.acks.done_below
        safe: tuple[int, BinlogPosition, str | None, Any, Existence] | None = None
        limit = self.xa.resume_limit  # an XA transaction not yet resolved is read again
        while self._pending and self._pending[0][0] <= done and (
                limit is None or self._pending[0][1] <= limit):
            safe = self._pending.popleft()
            self.rows.apply(safe[3])
        self._last_save = time.monotonic()
        if safe is not None and safe[1] != self._saved:
            self.store.save(BinlogCheckpoint(safe[1], safe[2], dict(self.stopped),
                                             self.rows.to_json(safe[1]), self._server,
                                             self._generation, safe[4].to_json()))
            self._saved = safe[1]
            self.stats.checkpoints_saved += 1

    def _where(self) -> str:
        return str(self._saved)

    # ---- rows -------------------------------------------------------------------------

    def _rows(self, event: Any, kind: str, file: str) -> None:
        db, name = event.schema, event.table
        if not server.included(self.source, db, name) or f"{db}.{name}" in self.stopped:
            return
        if self.existence.exists(db, name) is False:  # its CREATE was not recognised
            self.existence = self.existence.created(db, name)
        table = tap_tables.tapped(self, event, db, name)
        if table is None:
            return
        assert self.producer is not None and self.errors is not None
        end = BinlogPosition(file, event.packet.log_pos)
        if table.shape.key.kind == ROW and self.rows.skip(table.shape.qualified, end):
            return  # in the table's bootstrap snapshot already
        env = Envelope(self.source.kind, event.timestamp * 1000, self.source.data_center)
        if fastpath.publish(self, table, event, kind,
                            ref_file_index(end.file_index, self._generation), end.pos, env):
            return  # read and encoded by the table's generated code (fastpath.py)
        try:
            rows = event.rows  # read here: a row image the reader cannot parse stops the table
        except Exception as exc:
            self._stop_table(db, name, f"the rows event ending at {end} cannot be read "
                                       f"({type(exc).__name__}: {exc})")
            return
        self.stats.row_changes += len(rows)
        try:
            found = changes(table, kind, rows,
                            ref_file_index(end.file_index, self._generation), end.pos, env,
                            present(event))
        except (IncompatibleSchemaChange, PartialRowImage) as exc:  # a '|' in a joined
            # composite key (#9.7); a session's binlog_row_image=MINIMAL/NOBLOB (events.py)
            self._stop_table(db, name, str(exc))
            return
        self._publish_changes(table, found, (end.file, end.pos), env)


    def _stop_table(self, db: str, name: str, reason: str) -> None:
        """Stop publishing one table; its resume position is the last transaction end."""
        assert self._last_end is not None
        where = self._pending[-1][1] if self._pending else self._last_end
        self.stopped[f"{db}.{name}"] = {"file": where.file, "pos": where.pos, "error": reason}
        log.error("source %s: STOPPED table %s.%s at %s: %s", self.source.name, db, name, where,
                  reason)
