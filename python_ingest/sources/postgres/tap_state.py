"""The PostgreSQL tap's state (tap.py's PgTap): what it holds between messages, and the ref keys
of the transaction being read; tap_tables.py and tap_checkpoints.py work on it."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from python_ingest.config import Settings, SourceConfig
from python_ingest.config.source_kinds import PostgresOptions
from python_ingest.sources.postgres import pgoutput, server
from python_ingest.sources.postgres.events import PgTable
from python_ingest.sources.postgres.fastpath import FastTable, RefKeys
from python_ingest.sources.postgres.moves import RowReader
from python_ingest.sources.postgres.position import (
    PgCheckpointStore,
    ref_key,
)
from python_ingest.sources.postgres.streams import HeldStreams
from python_ingest.sources.postgres.wire import ReplicationStream
from python_ingest.sources.tap.changes import Envelope
from python_ingest.sources.tap.core import TapCore
from python_ingest.sources.tap.producer import BarrierProducer

SOURCE = "postgres"  # the events' _source


class TapState(TapCore):
    """The state of one PostgreSQL source's tap (what every tap holds: tap/core.py)."""

    producer: BarrierProducer | None
    store: PgCheckpointStore

    def __init__(self, settings: Settings, source: SourceConfig,
                 stop: threading.Event | None = None) -> None:
        super().__init__(settings, source,
                         PgCheckpointStore(settings.path(settings.state_dir), source.name),
                         stop)
        self.pg = source.of(PostgresOptions)  # the source's own settings (its slot, ...)
        self.relations: dict[int, pgoutput.Relation] = {}
        self.tables: dict[int, PgTable | None] = {}  # None: not tapped (excluded or stopped)
        self._fast: dict[int, FastTable] = {}  # the tapped tables fastpath.py can publish
        self._tails = (b"", b"")  # the envelope after _ref_key in this transaction (fastpath)
        self._signatures: dict[int, tuple[Any, ...]] = {}
        self._pending: deque[tuple[int, Any]] = deque()  # (end LSN, row counts) not saved
        self._rows_changed: dict[str, set[str]] = {}  # digests whose saved count changed
        self._saved = 0
        self._confirmed = 0
        self._last_idle_save = 0.0
        self._commit_lsn = 0  # of the transaction being read (0: none open)
        self._commit_ms = 0
        self._index = 0  # the next change's position in it
        self._refs = RefKeys()  # its ref keys' Avro bytes (fastpath)
        self.streams = HeldStreams()  # protocol 2: streamed transactions not committed yet
        self.streamed = self.streams.counts  # streamed transactions committed and aborted
        self._repl: Any = None
        self._reader = RowReader(lambda: server.connect(self.source))  # moves.py
        self._oids: dict[str, dict[str, Any]] = {}  # table → its relation oid (tables.py)
        self._slow: set[int] = set()  # tables off the fast path while they have gone keys
        self._unread = False  # a stop left messages of the last batch read unhandled
        self._gone: dict[str, set[str]] = {}  # table → its gone keys (moves.py), checkpointed
        self._cursor: Any = None
        self._stream: ReplicationStream | None = None  # read and confirmed by the tap (wire.py)
        self._produce: Any = None  # the producer's produce(topic, value, key)

    def _seen_end(self) -> int:
        return self._pending[-1][0] if self._pending else self._saved

    def _ref(self) -> int:
        return ref_key(self._commit_lsn, self._index)

    def _next_ref(self) -> int:
        ref = ref_key(self._commit_lsn, self._index)
        self._index += 1
        return ref

    _env = Envelope(SOURCE, 0, None)
