"""Where the tap starts reading: the checkpoint's position (checked against the server, a
failover by GTID onto another one, identity.py), or with no checkpoint yet the binlog's first
or current position (``start_from``); and the error saying why the server cannot go on from
there. Functions of the running tap (tap.py ``Tap``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from python_ingest.config.source_kinds import BinlogOptions
from python_ingest.exceptions import SluiceError, TapError
from python_ingest.sources.binlog import server
from python_ingest.sources.binlog.existence import Existence
from python_ingest.sources.binlog.identity import check_resume, identify, start_gtid
from python_ingest.sources.binlog.position import BinlogCheckpoint, BinlogPosition
from python_ingest.sources.tap import keys

if TYPE_CHECKING:
    from python_ingest.sources.binlog.tap_state import TapState

log = logging.getLogger(__name__)


def start_position(tap: TapState) -> BinlogPosition:
    """The position to read from, the tap's state restored from its checkpoint (or a first
    checkpoint saved at the start)."""
    checkpoint = tap.store.load()
    if checkpoint is not None:  # of this server's binlog (or GTID history), else TapError
        where = f"{tap.source.host}:{tap.source.port}"
        resume = check_resume(tap._conn, tap.source.name, where, checkpoint,
                              tap.store.path)
        tap._server = resume.identity.to_json()
        tap.stopped = dict(checkpoint.stopped)
        tap.rows = keys.RowCounts(checkpoint.rows)
        tap.existence = Existence.from_json(checkpoint.existence)
        tap._gtid = resume.gtid or checkpoint.gtid
        # by GTID only onto another server (a failover); on the checkpoint's own server by
        # file and position, which a reconnect inside a transaction also resumes exactly
        tap._resume_gtid = resume.gtid if resume.failover else None
        tap._failing_over = resume.failover
        tap._generation = checkpoint.generation + (1 if resume.failover else 0)
        if resume.failover:
            log.warning("source %s: the checkpoint is of another server (%s); this one "
                        "(%s) holds its GTID %s: failing over, resuming by GTID",
                        tap.source.name, checkpoint.server, resume.identity,
                        checkpoint.gtid)
        return checkpoint.position
    start_from = tap.source.of(BinlogOptions).start_from
    start = (server.master_position(tap._conn) if start_from == "current"
             else server.first_position(tap._conn))
    tap._server = identify(tap._conn).to_json()
    tap._gtid = start_gtid(tap._conn, start)
    tap.store.save(BinlogCheckpoint(start, tap._gtid, server=tap._server))
    log.info("source %s: no checkpoint yet, starting at %s (%s)", tap.source.name, start,
             start_from)
    return start


def stream_error(tap: TapState, exc: Exception) -> SluiceError:
    """The error of a failed binlog read, saying what to do (a purged binlog, a GTID the
    server lacks)."""
    text = str(exc)
    if ("1236" in text or "log file" in text.lower()) and tap._resume_gtid is not None:
        return TapError(f"source {tap.source.name}: the server cannot continue the binlog "
                        f"from the checkpoint's GTID {tap._resume_gtid} ({text}). Its "
                        "binlog was purged past it, or lacks it: point the source at a "
                        "server that holds it, or start the source over: bootstrap the "
                        "tables again (docs/binlog-tap.md)")
    if "1236" in text or "log file" in text.lower():
        return TapError(f"source {tap.source.name}: the server cannot continue the binlog "
                        f"from the checkpoint {tap._saved} ({text}). The binlog was "
                        "probably purged: bootstrap the tables again (docs/binlog-tap.md)")
    if isinstance(exc, SluiceError):
        return exc
    return TapError(f"source {tap.source.name}: reading the binlog failed after "
                    f"{tap._saved}: {type(exc).__name__}: {text}")
