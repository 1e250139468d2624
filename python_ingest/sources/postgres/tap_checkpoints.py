"""The PostgreSQL tap's checkpoints (tap.py): the producer's barrier, the checkpoint file, and
only then the slot confirmed (wire.py); the row copies of keyless tables (rowlog.py)."""

from __future__ import annotations

import logging
import time
from typing import Any

from python_ingest.sources.postgres.position import (
    PgCheckpoint,
    as_position,
    lsn_text,
)
from python_ingest.sources.postgres.tap_state import TapState

log = logging.getLogger("python_ingest.sources.postgres.tap")


class TapCheckpoints(TapState):
    """Saving what Kafka acknowledged, then confirming it to the server."""

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
        if not self._due(force):
            return
        self._last_save = time.monotonic()
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
        self.store.save(PgCheckpoint(lsn, self.pg.slot_name, dict(self.stopped), rows,
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

    def _finish_idle(self) -> None:
        """A clean stop (tap/core.py ``_finish``): the server's WAL end, when nothing is open
        and no message read was left unhandled (a stop inside a batch of messages: the WAL end
        lies past them)."""
        if self._unread:
            return
        self._last_idle_save = 0.0
        self._idle()

    def _where(self) -> str:
        return lsn_text(self._saved)
