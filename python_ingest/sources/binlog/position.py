"""Binlog positions, ref keys, and the tap's checkpoint file.

Ref key layout (a long): ``file index << 32 | offset``, where the file index is the binlog
file's numeric suffix and the offset a byte position inside it. The ``n`` row changes of one
rows event ending at byte ``end`` get ``end - n + i`` (i = 0..n-1): every row change takes at
least one byte of its event, so these lie inside the event, above everything before it and
below everything after it. A snapshot taken at a transaction boundary ``P`` gets ref key ``P``
itself: rows events before ``P`` end at or below it (their refs are < P) and rows events after it
start after the GTID/BEGIN event at ``P`` (their refs are > P).

After a failover (the tap resumed by GTID on another server, identity.py) positions are those
of another binlog, which may lie below the old server's: every failover starts a new
*generation*, kept in the checkpoint, and the ref key's file index becomes ``generation << 20 |
file index``. So every ref key of a later generation is above every ref key of an earlier one
(for binlog file suffixes below 2^20), and generation 0 is the layout above, unchanged.

The checkpoint file (``<state_dir>/tap/<source>.json``) names the position after the last
transaction whose events the broker acknowledged, the tables stopped by incompatible schema
changes, for tables with a full-row identity the copies of each distinct row at that
position (``rows``, see ``keys.RowCounts``), and the tables the stream has shown dropped or
created again at that position (``existence``, see existence.py). It is replaced atomically
(write a temp file, fsync, rename).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from python_ingest.exceptions import SluiceError
from python_ingest.sources.tap.checkpoints import AckWindow as AckWindow  # its former home
from python_ingest.sources.tap.checkpoints import CheckpointStore, Position

OFFSET_BITS = 32
GENERATION_SHIFT = 20  # bits of the binlog file index inside a ref key's file part
MAX_GENERATION = (1 << (31 - GENERATION_SHIFT)) - 1
_FILE_INDEX = re.compile(r"\.(\d+)$")


class BinlogPosition(Position):
    """A position in the server's binlog: file name and byte offset (ordered, tap/checkpoints.py
    ``Position``)."""

    @property
    def file_index(self) -> int:
        m = _FILE_INDEX.search(self.file)
        if not m:
            raise SluiceError(f"binlog file name {self.file!r} has no numeric suffix")
        return int(m.group(1))

    def ref_key(self, generation: int = 0) -> int:
        """The ref key of a snapshot taken at this (transaction boundary) position."""
        return pack_ref(ref_file_index(self.file_index, generation), self.pos)


def ref_file_index(file_index: int, generation: int) -> int:
    """The file part of a ref key: the binlog file index, above every earlier generation's."""
    if not generation:
        return file_index
    if not 0 < generation <= MAX_GENERATION or file_index >= 1 << GENERATION_SHIFT:
        raise SluiceError(f"binlog file index {file_index} in failover generation {generation} "
                          f"does not fit a ref key (at most {MAX_GENERATION} failovers and "
                          f"{(1 << GENERATION_SHIFT) - 1} binlog files): start the source over "
                          "(docs/binlog-tap.md, \"Checkpoints and restarts\")")
    return generation << GENERATION_SHIFT | file_index


def pack_ref(file_index: int, offset: int) -> int:
    if not 0 <= offset < 1 << OFFSET_BITS or not 0 <= file_index < 1 << 31:
        raise SluiceError(f"binlog position {file_index}:{offset} does not fit a ref key")
    return file_index << OFFSET_BITS | offset


def row_refs(file_index: int, event_end: int, count: int) -> list[int]:
    """Ref keys of the ``count`` row changes of a rows event ending at ``event_end``."""
    base = pack_ref(file_index, event_end - count)
    return [base + i for i in range(count)]


def unpack_ref(ref: int) -> tuple[int, int]:
    return ref >> OFFSET_BITS, ref & ((1 << OFFSET_BITS) - 1)


@dataclass(frozen=True)
class BinlogCheckpoint:
    """Where the tap resumes, which tables it stopped (table → position and reason), the
    row copies of full-row-identity tables (table → since, counts), the identity of the
    server whose binlog the position is in (identity.py), and the failover generation of the
    ref keys published from that server (0 until the first failover); ``existence``: which
    tables the stream has dropped or created at the position (existence.py)."""

    position: BinlogPosition
    gtid: str | None = None
    stopped: dict[str, dict[str, Any]] = field(default_factory=dict)
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    server: dict[str, Any] | None = None
    generation: int = 0
    existence: dict[str, bool] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = {"file": self.position.file, "pos": self.position.pos, "gtid": self.gtid,
                "stopped": self.stopped, "saved_at": datetime.now(UTC).isoformat()}
        if self.rows:
            data["rows"] = self.rows
        if self.server is not None:
            data["server"] = self.server
        if self.generation:
            data["generation"] = self.generation
        if self.existence:
            data["existence"] = self.existence
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BinlogCheckpoint:
        return cls(BinlogPosition(str(data["file"]), int(data["pos"])), data.get("gtid"),
                   dict(data.get("stopped") or {}), dict(data.get("rows") or {}),
                   data.get("server"), int(data.get("generation") or 0),
                   {str(k): bool(v) for k, v in (data.get("existence") or {}).items()})


class BinlogCheckpointStore(CheckpointStore[BinlogCheckpoint]):
    """The checkpoint file of one source, plus the lock that keeps a second tap out."""

    def load(self) -> BinlogCheckpoint | None:
        try:
            data = self.read()
            return None if data is None else BinlogCheckpoint.from_json(data)
        except (ValueError, KeyError) as exc:
            raise SluiceError(self.unreadable(exc)) from exc
