"""The tap on another server than its checkpoint's (a failover by GTID, identity.py, #35.8),
and a connection lost inside a transaction read by GTID. Functions of the running tap (tap.py
``Tap``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from python_ingest.sources.binlog.position import BinlogCheckpoint

if TYPE_CHECKING:
    from python_ingest.sources.binlog.tap_state import TapState

log = logging.getLogger(__name__)


def failed_over(tap: TapState) -> None:
    """The first event of the new server after a failover: from here on ref keys are of
    the next generation (position.py), and the checkpoint moves to this server's binlog
    at the position the GTID start resumed at, before anything of it is published."""
    tap._failing_over = False
    at = tap._boundary
    if at is not None:
        tap._saved = tap._last_end = at
    for table in sorted(tap.rows.since):  # a snapshot position on the old server
        tap.rows.since.pop(table)
        db, name = table.split(".", 1)
        tap._stop_table(db, name, "the source failed over to another server "
                         "before the tap passed the table's bootstrap snapshot, whose "
                         "position is in the old server's binlog. Bootstrap the table "
                         f"again (`sluice bootstrap {tap.source.name} {table}`)")
    if at is None:  # no boundary seen: the first transaction's checkpoint moves it
        log.warning("source %s: failed over by GTID %s; no binlog position known yet",
                    tap.source.name, tap._gtid)
        return
    tap.store.save(BinlogCheckpoint(at, tap._gtid, dict(tap.stopped),
                                     tap.rows.to_json(at), tap._server, tap._generation,
                                     tap.existence.to_json()))
    tap.stats.checkpoints_saved += 1
    log.warning("source %s: failed over to the server at %s:%s (%s): resumed by GTID %s at "
                "%s, ref keys of failover generation %d", tap.source.name,
                tap.source.host, tap.source.port, tap._server, tap._gtid, at,
                tap._generation)

def reconnected(tap: TapState) -> None:
    """A rotate event inside a transaction: the stream connected again (mysql-replication
    reconnects by itself when the connection is lost) and, by GTID, goes on at the start of
    the transaction it was reading. Its row events come again with the same positions, so
    the same ref keys: Kafka delivery is at least once anyway, and the merge counts a
    change (row key, ref key) once. The tap goes on; the checkpoint never moved inside the
    transaction."""
    log.warning("source %s: the connection to the server was lost inside a transaction "
                "(after GTID %s); reading it again from its start (its changes keep their "
                "ref keys: the copies count once in the lake)", tap.source.name, tap._gtid)
    tap._in_transaction = False
