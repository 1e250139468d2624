"""The row copies of full-row-identity (keyless) tables beside the PostgreSQL tap's checkpoint,
written incrementally.

The copies (tap/keys.py RowCounts: one count per distinct row digest) grow with the table;
written whole into the checkpoint file they made every checkpoint rewrite the whole map. Here
they live in files next to the checkpoint: a *base* (every count at one LSN, named by it) and a
*log* of JSON lines, one per checkpoint, holding only the digests whose count changed since the
one before (their new counts; 0: gone). The checkpoint file names its base (``rows_base``);
its LSN decides which lines count: a line past it was written by a tap killed before its
checkpoint file, and is dropped when read; a line at or before the base is in it. Once the log
outgrows the base (and 1 MiB) the next checkpoint writes a new base (the old one is removed
only once the checkpoint file names the new one), so a checkpoint costs what changed, and
reading costs at most about twice the map.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

_COMPACT_BYTES = 1 << 20


class RowLog:
    """The base and log files of one source's row copies (``<state_dir>/tap/<source>.rows.*``)."""

    def __init__(self, folder: Path, source: str) -> None:
        self.folder = folder
        self.source = source
        self.log_path = folder / f"{source}.rows.log"
        self.base_lsn: int | None = None  # the base the checkpoint file names

    def base_path(self, lsn: int) -> Path:
        return self.folder / f"{self.source}.rows.{lsn:016X}.json"

    def load(self, lsn: int, base_lsn: int) -> dict[str, dict[str, int]]:
        """The counts as of the checkpoint at ``lsn`` whose base is at ``base_lsn`` (log lines
        past ``lsn`` dropped from the log)."""
        base: dict[str, Any] = json.loads(self.base_path(base_lsn).read_text())
        self.base_lsn = base_lsn
        counts: dict[str, dict[str, int]] = {t: dict(c) for t, c in base["counts"].items()}
        kept: list[str] = []
        stale = False
        if self.log_path.is_file():
            for line in self.log_path.read_text().splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:  # a line cut short by a kill: after every valid one
                    stale = True
                    break
                if entry["lsn"] > lsn:
                    stale = True
                    break
                kept.append(line)
                if entry["lsn"] <= base["lsn"]:
                    continue  # in the base already (a kill between a new base and the log)
                for table, changed in entry["counts"].items():
                    table_counts = counts.setdefault(table, {})
                    for digest, n in changed.items():
                        if n > 0:
                            table_counts[digest] = n
                        else:
                            table_counts.pop(digest, None)
        if stale:
            _write(self.log_path, "".join(line + "\n" for line in kept))
        return {t: c for t, c in counts.items() if c}

    def append(self, lsn: int, changed: dict[str, dict[str, int]]) -> None:
        """One checkpoint's changed counts (written and synced before its checkpoint file)."""
        line = json.dumps({"lsn": lsn, "counts": changed}, separators=(",", ":")) + "\n"
        fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def wants_base(self) -> bool:
        """Whether there is no base yet, or the log outgrew it: the next checkpoint writes
        one."""
        if self.base_lsn is None or not self.base_path(self.base_lsn).is_file():
            return True
        log = self.log_path.stat().st_size if self.log_path.is_file() else 0
        return log > max(self.base_path(self.base_lsn).stat().st_size, _COMPACT_BYTES)

    def write_base(self, lsn: int, counts: dict[str, dict[str, int]]) -> None:
        """Every count at ``lsn`` (before the checkpoint file naming it; then ``settle``)."""
        _write(self.base_path(lsn), json.dumps({"lsn": lsn, "counts": counts},
                                               separators=(",", ":")))

    def settle(self, lsn: int) -> None:
        """The checkpoint file names the base at ``lsn`` now: older bases and the log's lines
        (all at or before it) go."""
        self.base_lsn = lsn
        _write(self.log_path, "")
        for path in self.folder.glob(f"{self.source}.rows.*.json"):
            if path != self.base_path(lsn):
                path.unlink(missing_ok=True)


def _write(path: Path, text: str) -> None:
    """Replace ``path`` whole: a temporary file synced, renamed over it, the folder synced."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
