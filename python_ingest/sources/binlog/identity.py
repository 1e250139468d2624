"""Which server, and which binlog history, a tap checkpoint belongs to (issue #9.9).

A binlog position (file, offset) means something only in the binlog it was read from. A tap
pointed at another server (a failover, a replica, a mistyped host) or at the same server after
``RESET MASTER`` would otherwise resume at a position that lies in another history: it may
fail with a cryptic server error, or silently skip or repeat changes. So every checkpoint
holds the server's identity, and resuming checks it and the position first:

- the **server**: MariaDB ``@@server_id`` and ``@@gtid_domain_id``; MySQL ``@@server_uuid``
  (and ``@@server_id``). Another server is refused;
- the **position**, on MariaDB: ``BINLOG_GTID_POS(file, pos)`` is the GTID state at that
  position, NULL when it is not an event boundary of a binlog the server has (purged, or
  reset); it must hold the checkpoint's last GTID, else the binlog was reset or replaced.
  On MySQL the file must be among ``SHOW BINARY LOGS`` and at least that long.

Either way the fix is the same: start the source over (delete the checkpoint, bootstrap the
tables). A checkpoint written before identities were recorded is accepted once and gets one.

**Failover** (issue #35.8): on MariaDB, when the checkpoint has a GTID position, another server
is accepted when its binlog history holds that position (``@@gtid_binlog_state``, gtid.py): a
replica that applied every transaction the checkpoint covers, whatever its server_id. The tap
then resumes there by GTID, in a new ref-key generation (position.py). A server whose history
does not hold it is refused, naming the GTIDs it lacks and the fix. Without a GTID (MySQL, or a
checkpoint that has none) another server is refused as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from python_ingest.exceptions import TapError
from python_ingest.sources.binlog import gtid
from python_ingest.sources.binlog.position import BinlogCheckpoint, BinlogPosition


@dataclass(frozen=True)
class ServerIdentity:
    """What tells one binlog server from another."""

    server_id: int
    gtid_domain_id: int | None = None  # MariaDB
    server_uuid: str | None = None  # MySQL

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in (("server_id", self.server_id),
                                  ("gtid_domain_id", self.gtid_domain_id),
                                  ("server_uuid", self.server_uuid)) if v is not None}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ServerIdentity:
        domain = data.get("gtid_domain_id")
        return cls(int(data["server_id"]), None if domain is None else int(domain),
                   data.get("server_uuid"))

    def __str__(self) -> str:
        text = f"server_id {self.server_id}"
        if self.server_uuid:
            text += f", server_uuid {self.server_uuid}"
        if self.gtid_domain_id is not None:
            text += f", gtid_domain_id {self.gtid_domain_id}"
        return text


@dataclass(frozen=True)
class Resume:
    """How the tap resumes from a checkpoint on the server it is connected to: by the GTID
    position ``gtid`` (MariaDB) or, when None, by the checkpoint's file and position;
    ``failover``: the server is another than the checkpoint's (its history holds the GTID)."""

    identity: ServerIdentity
    gtid: str | None = None
    failover: bool = False


def identify(conn: Any) -> ServerIdentity:
    """The identity of the server ``conn`` is connected to."""
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN "
                    "('server_id', 'gtid_domain_id', 'server_uuid')")
        found = {str(k).lower(): str(v) for k, v in cur.fetchall()}
    domain = found.get("gtid_domain_id")
    return ServerIdentity(int(found.get("server_id", 0)), None if domain is None else int(domain),
                          found.get("server_uuid") or None)


_UNKNOWN = "?"  # the server cannot say (MySQL has no BINLOG_GTID_POS)


def gtid_state_at(conn: Any, position: BinlogPosition) -> str | None:
    """The server's GTID state at ``position`` ('' before any GTID), None when the position is
    not in its binlog, ``_UNKNOWN`` when it cannot tell (then the file and size are checked)."""
    import pymysql

    with conn.cursor() as cur:
        try:
            cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (position.file, position.pos))
            row = cur.fetchone()
            return None if row is None or row[0] is None else str(row[0])
        except pymysql.err.MySQLError:
            cur.execute("SHOW BINARY LOGS")
            sizes = {str(r[0]): int(r[1]) for r in cur.fetchall()}
    size = sizes.get(position.file)
    return _UNKNOWN if size is not None and size >= position.pos else None


def binlog_state(conn: Any) -> str:
    """The server's ``@@gtid_binlog_state``: the last GTID per domain and server_id its binlog
    ever held ('' when it cannot say)."""
    import pymysql

    with conn.cursor() as cur:
        try:
            cur.execute("SELECT @@GLOBAL.gtid_binlog_state")
        except pymysql.err.MySQLError:
            return ""
        row = cur.fetchone()
    return str(row[0] or "") if row else ""


def start_gtid(conn: Any, position: BinlogPosition) -> str | None:
    """The GTID state to record with a checkpoint made at ``position`` (None: none known)."""
    state = gtid_state_at(conn, position)
    return state if state and state != _UNKNOWN else None


def _start_over(source: str, checkpoint_path: Path) -> str:
    return (f"Start the source over: stop the tap, delete {checkpoint_path}, run `sluice "
            f"bootstrap {source} <db.table>` for each tapped table, then start the tap "
            "(docs/binlog-tap.md, \"Checkpoints and restarts\")")


def by_gtid(checkpoint: BinlogCheckpoint, current: ServerIdentity) -> bool:
    """Whether the tap can resume ``checkpoint`` by GTID on ``current``: a MariaDB server and
    a checkpoint holding a MariaDB GTID position."""
    return current.gtid_domain_id is not None and bool(gtid.parse(checkpoint.gtid))


def foreign_server(source: str, where: str, checkpoint: BinlogCheckpoint, current: ServerIdentity,
                   checkpoint_path: Path, state: str | None = None) -> TapError | None:
    """The error when ``checkpoint`` was written against another server than ``current``.
    ``state``: the server's ``@@gtid_binlog_state``, when the tap could resume there by GTID
    (then the error names the GTIDs its history lacks, None when it holds them all)."""
    if checkpoint.server is None:
        return None
    saved = ServerIdentity.from_json(checkpoint.server)
    if saved == current:
        return None
    fix = ("If the source really moved to this server: " + _start_over(source, checkpoint_path)
           + "; otherwise point the source back at its server")
    if state is not None and checkpoint.gtid and by_gtid(checkpoint, current):
        lacking = gtid.missing(checkpoint.gtid, state)
        if not lacking:
            return None
        return TapError(f"source {source}: the checkpoint {checkpoint_path} was written against "
                        f"another server ({saved}) than the one at {where} ({current}), and "
                        f"this server's binlog history (gtid_binlog_state '{state}') does not "
                        f"hold the checkpoint's GTID {checkpoint.gtid} (it lacks "
                        f"{', '.join(lacking)}): it is not a replica that applied every "
                        "transaction the tap published, so the tap cannot go on from the same "
                        "transaction here. Point the source at a replica that has them (the "
                        "tap resumes there by GTID). " + fix)
    return TapError(f"source {source}: the checkpoint {checkpoint_path} belongs to another "
                    f"server ({saved}) than the one at {where} ({current}); its position "
                    f"{checkpoint.position} means nothing in this server's binlog, and without "
                    "a MariaDB GTID in the checkpoint the tap cannot resume by GTID. " + fix)


def check_resume(conn: Any, source: str, where: str, checkpoint: BinlogCheckpoint,
                 checkpoint_path: Path) -> Resume:
    """Raise TapError unless ``checkpoint`` is a position of this server's current binlog
    history, or (failover) a GTID position its history holds; returns how to resume."""
    current = identify(conn)
    gtids = by_gtid(checkpoint, current)
    error = foreign_server(source, where, checkpoint, current, checkpoint_path,
                           binlog_state(conn) if gtids else None)
    if error is not None:
        raise error
    if checkpoint.server is not None and ServerIdentity.from_json(checkpoint.server) != current:
        return Resume(current, checkpoint.gtid, failover=True)
    state = gtid_state_at(conn, checkpoint.position)
    last = f" (last GTID {checkpoint.gtid})" if checkpoint.gtid else ""
    if state is None:
        raise TapError(f"source {source}: the checkpoint's position {checkpoint.position}{last} "
                       f"is not in the binlog of the server at {where} ({current}): the binlog "
                       "was purged past it, or reset (RESET MASTER) and begun anew. "
                       + _start_over(source, checkpoint_path))
    if state != _UNKNOWN and checkpoint.gtid:
        held = set(state.split(","))
        if not set(checkpoint.gtid.split(",")) <= held:
            raise TapError(f"source {source}: at the checkpoint's position "
                           f"{checkpoint.position} the binlog of the server at {where} "
                           f"({current}) is at GTID {state or 'none'}, not at the checkpoint's "
                           f"{checkpoint.gtid}: the binlog was reset (RESET MASTER) or "
                           "replaced. " + _start_over(source, checkpoint_path))
    # by GTID: the position's whole GTID state (every domain), as this server says it is
    return Resume(current, state if gtids and state and state != _UNKNOWN else None)
