"""Partitions of a landing dir: which exist, which are complete, which a run takes.

A partition is a directory under the landing dir that holds data files directly
(``dt=2026-11-23/hour=07/part-0.avro``); its key is its path relative to the landing dir, and
key order is age order (hive-style names with zero-padded values sort by time). Data files are
the ones with a known extension (``FORMATS``); names starting with ``_`` or ``.`` (markers,
temporary copies) are never data.

A partition is ready when it is complete: it holds a ``_SUCCESS`` marker, or neither it nor
any of its files changed (size, mtime) for ``settle_seconds``. Listing is plain ``os.scandir``
(no Spark), so a runner can ask cheaply whether a files job has work.

A partition is late when it sorts at or below the watermark of the processed partitions but
arrived after every partition the listing behind that watermark saw: no run ever saw it, and
none will take it. Arrival is the inode change time (ctime) of its directory or a data file:
copying tools can set mtimes, not that; and it is the landing dir's own clock on both sides of
the comparison, whatever the hosts' clocks. Selection reports a late partition
(``Selection.late``) instead of skipping it in silence.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from python_ingest.config.files import FileSourceConfig
from python_ingest.tables.checkpoints import ProcessedPartitions

SUCCESS_MARKER = "_SUCCESS"
# extension → format the reader parses (sources/files/reader.py)
FORMATS = {".avro": "avro", ".json": "json", ".jsonl": "json", ".ndjson": "json",
           ".csv": "csv", ".parquet": "parquet"}


@dataclass(frozen=True)
class DataFile:
    """One data file as listed: its size and mtime are its fingerprint."""

    path: str  # absolute
    size: int
    mtime_ns: int

    @property
    def format(self) -> str:
        return FORMATS[Path(self.path).suffix.lower()]

    def changed(self) -> bool:
        """Whether the file differs from when it was listed (or is gone)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return True
        return (st.st_size, st.st_mtime_ns) != (self.size, self.mtime_ns)


@dataclass(frozen=True)
class Partition:
    """A partition directory: its key, its data files (sorted by name), and readiness facts."""

    key: str
    files: tuple[DataFile, ...]
    has_success: bool
    changed_ns: int  # the newest mtime of the directory and its files
    arrived_ns: int = 0  # the newest ctime of the directory and its data files

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)

    def ready(self, settle_seconds: float, now: float | None = None) -> bool:
        """Complete: a _SUCCESS marker, or nothing changed for ``settle_seconds``."""
        if self.has_success:
            return True
        now = time.time() if now is None else now
        return bool(self.files) and now - self.changed_ns / 1e9 >= settle_seconds


def _is_data(name: str) -> bool:
    return not name.startswith(("_", ".")) and Path(name).suffix.lower() in FORMATS


def discover(landing: str | Path) -> list[Partition]:
    """Every partition under ``landing``, in key order (an absent landing dir has none)."""
    root = Path(landing)
    found: list[Partition] = []
    if not root.is_dir():
        return found
    stack = [root]
    while stack:
        folder = stack.pop()
        files: list[DataFile] = []
        success = False
        try:
            stat = folder.stat()
            newest, arrived = stat.st_mtime_ns, stat.st_ctime_ns
            entries = list(os.scandir(folder))
        except FileNotFoundError:  # removed while listing
            continue
        for entry in entries:
            if entry.name.startswith((".", "_")) and entry.name != SUCCESS_MARKER:
                continue  # hidden, or a writer's temporary folder (_temporary)
            if entry.is_dir(follow_symlinks=False):
                stack.append(Path(entry.path))
            elif entry.name == SUCCESS_MARKER:
                success = True
            elif _is_data(entry.name):
                try:
                    st = entry.stat()
                except FileNotFoundError:
                    continue
                files.append(DataFile(entry.path, st.st_size, st.st_mtime_ns))
                newest = max(newest, st.st_mtime_ns)
                arrived = max(arrived, st.st_ctime_ns)
        if files or (success and folder != root):
            key = folder.relative_to(root).as_posix()
            found.append(Partition(key, tuple(sorted(files, key=lambda f: f.path)), success,
                                   newest, arrived))
    return sorted(found, key=lambda p: p.key)


@dataclass(frozen=True)
class Selection:
    """What a run may take: ready unprocessed partitions within the caps, oldest first."""

    take: tuple[Partition, ...]
    waiting: tuple[str, ...]  # unprocessed, not ready yet (still being written)
    left: tuple[str, ...]  # ready and unprocessed, beyond this run's caps or leased
    late: tuple[str, ...] = ()  # below the watermark, never taken, newly found (not reported yet)

    @property
    def pending(self) -> tuple[str, ...]:
        """Unprocessed keys this run does not take (they hold the watermark back)."""
        return self.waiting + self.left


def select(partitions: Iterable[Partition], processed: ProcessedPartitions,
           config: FileSourceConfig, max_bytes: int, now: float | None = None,
           busy: Iterable[str] = ()) -> Selection:
    """Pick the partitions a run takes: ready, not processed, not leased by another run
    (``busy``), oldest first, at most ``max_partitions`` and ``max_bytes`` (the first
    partition is taken whatever its size, so that a huge one cannot block the job). Late
    partitions are skipped too, but listed in ``late`` when not reported before."""
    now = time.time() if now is None else now
    busy = set(busy)
    take: list[Partition] = []
    waiting: list[str] = []
    left: list[str] = []
    late: list[str] = []
    total = 0
    for partition in partitions:
        if partition.key in processed:
            if is_late(partition, processed):
                late.append(partition.key)
            continue
        if not partition.ready(config.settle_seconds, now):
            waiting.append(partition.key)
        elif (partition.key in busy or len(take) >= config.max_partitions
              or (take and total + partition.bytes > max_bytes)):
            left.append(partition.key)
        else:
            take.append(partition)
            total += partition.bytes
    return Selection(tuple(take), tuple(waiting), tuple(left), tuple(late))


def is_late(partition: Partition, processed: ProcessedPartitions) -> bool:
    """At or below the watermark, yet arrived after all the listing behind it saw, and not
    reported before: skipped, never read (docs/files-source.md, "Late partitions")."""
    return (processed.seen_until is not None and partition.key not in processed.done
            and processed.below_watermark(partition.key) and partition.key not in processed.late
            and partition.arrived_ns / 1e9 > processed.seen_until)


def newest_arrival(partitions: Iterable[Partition]) -> float:
    """The newest arrival among listed partitions (epoch seconds; 0 when none): what a
    checkpoint records as ``seen_until``."""
    return max((p.arrived_ns for p in partitions), default=0) / 1e9


def ready_backlog(config: FileSourceConfig, processed: ProcessedPartitions) -> int:
    """Ready partitions not processed yet: what a runner's poll asks of a files job (a
    directory listing, no Spark)."""
    now = time.time()
    return sum(1 for p in discover(config.path)
               if p.key not in processed and p.ready(config.settle_seconds, now))
