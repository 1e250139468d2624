"""LSNs, the ref keys of PostgreSQL changes, and the PostgreSQL tap's checkpoint file.

**Ref key** (a long): ``(commit LSN << 18) + i`` for the i-th row change (0, 1, ...) of the
transaction. Transactions are published in commit order and commit LSNs increase, so ref keys
increase through the stream: two consecutive commit records lie at least 24 bytes apart (the
size of a commit record), so the last change of a transaction of fewer than 24 × 2^18 (6.3
million) changes stays below the next transaction's first. The commit LSN must stay below
2^45 (32 TiB of WAL written over the cluster's life, pg_current_wal_lsn() below 2000/0):
past either bound ``ref_key`` raises. A snapshot copied at the slot's consistent point ``P``
gets ``P << 18``: every transaction the stream sends after it commits above ``P``.

**Checkpoint** (``<state_dir>/tap/<source>.json``): the LSN from which the tap resumes (the
end of the last transaction whose events Kafka acknowledged; the slot's confirmed flush
position is moved there only after the file is written), the slot it belongs to, the tables
stopped, and the copies of full-row-identity tables (keys.RowCounts). Written like the binlog
tap's (tap/checkpoints.py: temp file, fsync, rename), under the same lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from python_ingest.exceptions import SluiceError, TapError
from python_ingest.sources.postgres.rowlog import RowLog
from python_ingest.sources.tap.checkpoints import CheckpointStore, Position

REF_SHIFT = 18
MAX_COMMIT_LSN = (1 << (63 - REF_SHIFT)) - 1
MAX_CHANGES = 24 << REF_SHIFT


def lsn_text(lsn: int) -> str:
    """PostgreSQL's text form of an LSN: ``16/B374D848``."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    high, low = text.split("/")
    return int(high, 16) << 32 | int(low, 16)


def ref_key(commit_lsn: int, index: int) -> int:
    """The ref key of a transaction's ``index``-th change (see the module doc)."""
    if commit_lsn > MAX_COMMIT_LSN:
        raise TapError(f"commit LSN {lsn_text(commit_lsn)} does not fit a ref key (at most "
                       f"{lsn_text(MAX_COMMIT_LSN)}, 32 TiB of WAL over the cluster's life). A "
                       "cluster's LSNs only grow (pg_upgrade keeps them too), so no new slot or "
                       "bootstrap on it helps: copy the database into a new cluster (initdb, "
                       "then pg_dump and pg_restore, or logical replication into it: its WAL "
                       "starts near 0/0), point the source at it, and start each of its tables "
                       "over, since the lake's rows carry the old cluster's larger ref keys "
                       "(docs/postgres-source.md, \"Ref keys\")")
    if index >= MAX_CHANGES:
        raise TapError(f"the transaction committed at {lsn_text(commit_lsn)} holds more than "
                       f"{MAX_CHANGES} row changes, more than a ref key orders exactly: split "
                       "such transactions (docs/postgres-source.md, \"Ref keys\")")
    return (commit_lsn << REF_SHIFT) + index  # an index past 2^18 carries into the LSN bits


def as_position(lsn: int) -> Position:
    """An LSN as an ordered position (keys.RowCounts compares positions)."""
    return Position("lsn", lsn)


@dataclass(frozen=True)
class PgCheckpoint:
    """Where the tap resumes (``lsn``), in which slot, which tables are stopped (table →
    position and reason), and the row copies of full-row-identity tables."""

    lsn: int
    slot: str
    stopped: dict[str, dict[str, Any]] = field(default_factory=dict)
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    # table → {"oid": the relation its lake rows are from, "since": the LSN from which on}
    relations: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the row copies' counts are in rowlog.py's files (this base and the log), ``rows`` holds
    # only the snapshot marks; None: ``rows`` holds the counts too (a bootstrap writes them)
    rows_base: int | None = None
    # table → the keys the lake cannot have until the stream deletes or inserts them (moves.py)
    gone: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": "postgres", "lsn": lsn_text(self.lsn), "slot": self.slot,
                                "stopped": self.stopped,
                                "saved_at": datetime.now(UTC).isoformat()}
        if self.rows:
            data["rows"] = self.rows
        if self.relations:
            data["relations"] = self.relations
        if self.rows_base is not None:
            data["rows_base"] = lsn_text(self.rows_base)
        if self.gone:
            data["gone"] = self.gone
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PgCheckpoint:
        return cls(parse_lsn(str(data["lsn"])), str(data["slot"]),
                   dict(data.get("stopped") or {}), dict(data.get("rows") or {}),
                   dict(data.get("relations") or {}),
                   parse_lsn(data["rows_base"]) if data.get("rows_base") else None,
                   {str(k): list(v) for k, v in (data.get("gone") or {}).items()})


class PgCheckpointStore(CheckpointStore[PgCheckpoint]):
    """The checkpoint file of one PostgreSQL source, and the lock that keeps a second tap (or
    a bootstrap) out."""

    def __init__(self, state_dir: Path, source: str) -> None:
        super().__init__(state_dir, source)
        self.row_log = RowLog(self.folder, source)

    def load(self) -> PgCheckpoint | None:
        try:
            data = self.read()
            if data is None:
                return None
            if data.get("kind") != "postgres":
                raise ValueError("not a PostgreSQL tap checkpoint")
            checkpoint = PgCheckpoint.from_json(data)
            if checkpoint.rows_base is None:
                return checkpoint
            counts = self.row_log.load(checkpoint.lsn, checkpoint.rows_base)
            rows = {t: {"since": checkpoint.rows.get(t, {}).get("since"),
                        "counts": counts.get(t, {})} for t in sorted({*counts, *checkpoint.rows})}
            return replace(checkpoint, rows=rows, rows_base=None)  # counts inline, as written
        except (ValueError, KeyError, OSError) as exc:
            raise SluiceError(self.unreadable(exc)) from exc
