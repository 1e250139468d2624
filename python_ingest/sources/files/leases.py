"""Partition leases: which run is reading which partition, so that runs split the work.

A run that takes a partition creates ``<state_dir>/file-leases/<job>/<key>.lease`` (the key
URL-quoted) with an exclusive create, holding its run id, host, pid and when it took it. A
lease older than the job's ``lease_timeout`` belongs to a run that died (or stalls) and is
retaken (at once when its holder was a process on this host that no longer runs):
through a take-over marker named after the stale lease's token, which only one
process can create, so two runs never both retake it. A run releases its leases when it ends,
committed or not.

Leases keep runs from doing the same work; exactly-once does not rest on them alone. The
commit does: under the job's commit lock (``commit_lock``, an ``flock`` on a file beside the
leases) a run re-reads the raw checkpoint, drops the partitions it lists as done and commits
the rest with the new checkpoint. So a partition read twice (a lease retaken from a run that
was only slow) still lands once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
import uuid
from collections.abc import Container, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from python_ingest.runtime.processes import gone_from_this_host, host_name

LEASE_SUFFIX = ".lease"
TAKEOVER = ".takeover."


def lease_dir(state_dir: Path, job: str) -> Path:
    """Where ``job``'s partition leases live (created on first use)."""
    folder = state_dir / "file-leases" / job
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def lease_file(folder: Path, key: str) -> Path:
    """The lease file of partition ``key`` (its key URL-quoted: one file name)."""
    return folder / (quote(key, safe="=") + LEASE_SUFFIX)


class PartitionLeases:
    """The partition leases of one run of a files job."""

    def __init__(self, folder: Path, run_id: str, timeout_s: float) -> None:
        self.folder = folder
        self.run_id = run_id
        self.timeout_s = timeout_s
        self.held: set[str] = set()

    def _path(self, key: str) -> Path:
        return lease_file(self.folder, key)

    @staticmethod
    def _read(path: Path) -> dict[str, Any] | None:
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except ValueError:  # a half-written lease (its writer died writing it): stale
            return {"token": "corrupt", "taken_at": 0.0}
        return data if isinstance(data, dict) else {"token": "corrupt", "taken_at": 0.0}

    def _holder(self) -> dict[str, Any]:
        return {"run": self.run_id, "token": uuid.uuid4().hex, "host": host_name(),
                "pid": os.getpid(), "taken_at": time.time()}

    def expired(self, holder: dict[str, Any], now: float | None = None) -> bool:
        """Older than the timeout, or left by a process on this host that no longer runs."""
        now = time.time() if now is None else now
        too_old = now - float(holder.get("taken_at", 0.0)) > self.timeout_s
        return too_old or gone_from_this_host(holder)

    def busy(self) -> set[str]:
        """Keys leased by other runs, unexpired."""
        found = set()
        for path in self.folder.glob("*" + LEASE_SUFFIX):
            holder = self._read(path)
            if holder and holder.get("run") != self.run_id and not self.expired(holder):
                found.add(unquote(path.name[:-len(LEASE_SUFFIX)]))
        return found

    def sweep(self, processed: Container[str]) -> None:
        """Remove expired leases (a dead run's) of partitions already processed: no run
        takes those again, so nothing else would."""
        for path in self.folder.glob("*" + LEASE_SUFFIX):
            holder = self._read(path)
            if holder and self.expired(holder) and unquote(
                    path.name[:-len(LEASE_SUFFIX)]) in processed:
                path.unlink(missing_ok=True)
                for marker in self.folder.glob(path.name + TAKEOVER + "*"):
                    marker.unlink(missing_ok=True)

    def take(self, key: str) -> bool:
        """Lease ``key`` for this run; False if another run holds it."""
        path = self._path(key)
        holder = self._holder()
        return self._create(key, path, holder) or self._take_over(key, path, holder)

    def _take_over(self, key: str, path: Path, holder: dict[str, Any]) -> bool:
        stale = self._read(path)
        if stale is None:  # released meanwhile: try a plain take once more
            return self._create(key, path, holder)
        if stale.get("run") == self.run_id:
            self.held.add(key)
            return True
        if not self.expired(stale):
            return False
        marker = path.with_name(path.name + TAKEOVER + str(stale.get("token")))
        try:
            os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except FileExistsError:
            return False  # another run is retaking it
        if (self._read(path) or {}).get("token") != stale.get("token"):
            return False  # changed hands meanwhile
        temporary = path.with_name(f".{path.name}.{holder['token']}")
        temporary.write_text(json.dumps(holder))
        os.replace(temporary, path)
        self.held.add(key)
        return True

    def _create(self, key: str, path: Path, holder: dict[str, Any]) -> bool:
        """Create the lease file if absent (an exclusive create); False if it exists."""
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as out:
            json.dump(holder, out)
        self.held.add(key)
        return True

    def release(self) -> None:
        """Drop every lease this run holds (and the take-over markers of their keys)."""
        for key in sorted(self.held):
            path = self._path(key)
            if (self._read(path) or {}).get("run") == self.run_id:
                path.unlink(missing_ok=True)
            for marker in self.folder.glob(path.name + TAKEOVER + "*"):
                marker.unlink(missing_ok=True)
        self.held.clear()


@contextlib.contextmanager
def commit_lock(folder: Path) -> Iterator[None]:
    """Hold the job's commit lock: one run at a time re-reads the checkpoint and commits.

    An ``flock``: exclusive between processes (and threads, each opening the file) on one
    host; across hosts the job lease (tables/lease.py) keeps runs apart."""
    with open(folder / ".commit.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
