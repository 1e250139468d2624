"""What every tap's checkpoint shares: an ordered stream position, the checkpoint file with the
lock that keeps a second tap out, and the window of produced messages the broker has
acknowledged (a checkpoint covers only acknowledged messages).

Each kind keeps its own checkpoint and how it reads it: binlog/position.py
(``BinlogCheckpointStore``, positions in binlog files), postgres/position.py
(``PgCheckpointStore``, LSNs). The file (``<state_dir>/tap/<source>.json``) is replaced
atomically: write a temp file, fsync, rename, fsync the folder.
"""

from __future__ import annotations

import fcntl
import json
import os
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Generic, Protocol, TypeVar

from python_ingest.runtime.files import private_dir


@dataclass(frozen=True, eq=False)
class Position:
    """A place in a source's change stream, ordered by (file, offset): a binlog file and byte
    offset (binlog/position.py ``BinlogPosition``), or ``("lsn", LSN)`` for PostgreSQL
    (postgres/position.py ``as_position``). Positions of any subclass compare with each other
    (keys.RowCounts keeps snapshot positions read back from a checkpoint)."""

    file: str
    pos: int

    def _key(self) -> tuple[str, int]:
        return self.file, self.pos

    def __eq__(self, other: object) -> bool:
        return self._key() == other._key() if isinstance(other, Position) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._key())

    def __lt__(self, other: Position) -> bool:
        return self._key() < other._key() if isinstance(other, Position) else NotImplemented

    def __le__(self, other: Position) -> bool:
        return self._key() <= other._key() if isinstance(other, Position) else NotImplemented

    def __gt__(self, other: Position) -> bool:
        return self._key() > other._key() if isinstance(other, Position) else NotImplemented

    def __ge__(self, other: Position) -> bool:
        return self._key() >= other._key() if isinstance(other, Position) else NotImplemented

    def __str__(self) -> str:
        return f"{self.file}:{self.pos}"


class Checkpoint(Protocol):
    def to_json(self) -> dict[str, Any]: ...


C = TypeVar("C", bound=Checkpoint)


class CheckpointStore(ABC, Generic[C]):
    """The checkpoint file of one source, plus the lock that keeps a second tap (or a
    bootstrap) out. A kind's store reads its own checkpoint (``load``)."""

    def __init__(self, state_dir: Path, source: str) -> None:
        self.folder = state_dir / "tap"
        self.path = self.folder / f"{source}.json"
        self.lock_path = self.folder / f"{source}.lock"
        self._lock: IO[str] | None = None

    @abstractmethod
    def load(self) -> C | None:
        """The saved checkpoint, None when there is none."""

    def read(self) -> dict[str, Any] | None:
        """The checkpoint file's JSON, None when there is no file."""
        if not self.path.is_file():
            return None
        data: dict[str, Any] = json.loads(self.path.read_text())
        return data

    def unreadable(self, exc: Exception) -> str:
        return (f"the tap checkpoint {self.path} is unreadable ({exc}); restore it or delete it "
                "and bootstrap the tables again")

    def save(self, checkpoint: C) -> None:
        private_dir(self.folder)  # stop reasons may quote key values: owner-only
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
            json.dump(checkpoint.to_json(), out, indent=2)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.path)
        dir_fd = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def try_lock(self) -> bool:
        """Take the source's lock (held while a tap runs); False if another process has it."""
        private_dir(self.folder)
        handle = open(self.lock_path, "a+")  # noqa: SIM115 - held until release()
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return False
        self._lock = handle
        return True

    def release(self) -> None:
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None


class AckWindow:
    """Tracks which produced messages the broker acknowledged, in production order.

    Messages get consecutive sequence numbers; ``done_below`` is the first sequence number
    not yet acknowledged, so a checkpoint taken after message ``s`` is safe once
    ``done_below > s``.
    """

    def __init__(self) -> None:
        self.next_seq = 0
        self.done_below = 0
        self._acked: deque[bool] = deque()
        self.failures: list[str] = []

    def issue(self) -> int:
        seq = self.next_seq
        self.next_seq += 1
        self._acked.append(False)
        return seq

    def ack(self, seq: int, error: str | None = None) -> None:
        if error is not None:
            self.failures.append(error)
            return
        self._acked[seq - self.done_below] = True
        while self._acked and self._acked[0]:
            self._acked.popleft()
            self.done_below += 1

    @property
    def in_flight(self) -> int:
        return self.next_seq - self.done_below
