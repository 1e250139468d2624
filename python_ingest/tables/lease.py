"""One run of a job at a time: a lease file per job in the warehouse.

Every process that runs a job (``sluice run``, ``sluice ingest``, a runner, another host on the
same warehouse) first takes the job's lease, ``<warehouse>/meta/.sluice_leases/<job>``: a file
created only if absent (an atomic create on local disks and HDFS; not on S3, see
docs/reliability.md), holding who took it and until when. A second run fails at once, naming
the holder. The holder renews the lease while it runs (every ``RENEW_S``); a lease whose holder
died expires after ``TTL_S`` (at once when the holder was a process on the same host that no
longer runs) and the next run takes it over (through a take-over marker that only one process
can create). Before each commit that moves a checkpoint the holder checks
that the lease is still its own (``check_held``), so a run that lost its lease (paused longer
than the TTL, then taken over) writes nothing more.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from python_ingest.exceptions import SluiceError
from python_ingest.runtime.catalog import WAREHOUSE_CONF
from python_ingest.runtime.processes import gone_from_this_host

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

LEASE_DIR = "meta/.sluice_leases"  # a dot folder: no catalog takes it for a table or namespace
CLAIM_DIR = "meta/.sluice_claims"  # which continuous runner runs a job (runner/claims.py)
TTL_S = 600.0  # a dead holder's lease expires after this
RENEW_S = 60.0  # a live holder renews this often

_held: dict[str, Lease] = {}  # the leases this process holds, by job
_held_lock = threading.Lock()


class LeaseHeldError(SluiceError):
    """Another run of the job holds its lease."""

    def __init__(self, job: str, holder: dict[str, Any]) -> None:
        self.job, self.holder = job, holder
        until = datetime.fromtimestamp(float(holder.get("expires", 0)), UTC)
        super().__init__(
            f"job {job} is being run by {_who(holder)} (lease held until "
            f"{until:%Y-%m-%d %H:%M:%S} UTC unless renewed); nothing was done. Wait for that "
            f"run to finish; a lease left by a process that died expires by itself")


class LeaseLostError(SluiceError):
    """This run's lease expired and another run took the job over."""

    def __init__(self, job: str, holder: dict[str, Any] | None) -> None:
        super().__init__(
            f"this run of job {job} lost its lease (it was paused longer than {TTL_S:.0f} s) "
            f"to {_who(holder) if holder else 'nobody'}; it stopped before its next commit, so "
            "the checkpoint stays where the last commit left it")


def _who(holder: dict[str, Any]) -> str:
    return (f"run {holder.get('run', '?')} (pid {holder.get('pid', '?')} on "
            f"{holder.get('host', '?')}, since {holder.get('since', '?')})")


@dataclass
class Lease:
    """A job's lease held by this process."""

    job: str
    path: Any  # org.apache.hadoop.fs.Path
    fs: Any  # its FileSystem
    holder: dict[str, Any]
    lost: threading.Event = field(default_factory=threading.Event)
    stopped: threading.Event = field(default_factory=threading.Event)

    def check(self) -> None:
        """Raise LeaseLostError unless this lease is still this run's."""
        current = _read(self.fs, self.path)
        if self.lost.is_set() or current is None or current.get("run") != self.holder["run"]:
            self.lost.set()
            raise LeaseLostError(self.job, current)


def lease_path(spark: SparkSession, job: str, folder: str = LEASE_DIR) -> tuple[Any, Any]:
    jvm = spark._jvm
    assert jvm is not None
    where = f"{spark.conf.get(WAREHOUSE_CONF)}/{folder}"
    path = jvm.org.apache.hadoop.fs.Path(f"{where}/{job}" if job else where)
    return path, path.getFileSystem(spark._jsc.hadoopConfiguration())


def _read(fs: Any, path: Any) -> dict[str, Any] | None:
    try:
        stream = fs.open(path)
    except Exception:  # gone (released or being taken over)
        return None
    try:
        data = bytes(stream.readAllBytes())
    finally:
        stream.close()
    try:
        loaded = json.loads(data.decode())
        return loaded if isinstance(loaded, dict) else None
    except ValueError:
        # empty or cut: being rewritten by its holder's renewal (milliseconds), or left so by
        # a process killed between creating the file and writing it. Held for RENEW_S after
        # the file last changed, then expired: never held for ever (found with a SIGKILL at a
        # random moment of a runner)
        try:
            changed_s = fs.getFileStatus(path).getModificationTime() / 1000
        except Exception:  # gone since it was read (released or being taken over)
            return None
        return {"run": "?", "expires": changed_s + RENEW_S}


def _write(fs: Any, path: Any, holder: dict[str, Any], overwrite: bool) -> None:
    stream = fs.create(path, overwrite)  # overwrite=False: fails if the file exists
    try:
        stream.write(bytearray(json.dumps(holder).encode()))
    finally:
        stream.close()


def _exists_error(exc: Exception) -> bool:
    return "FileAlreadyExistsException" in str(exc) or "already exists" in str(exc)


def acquire(spark: SparkSession, job: str, ttl_s: float = TTL_S,
            folder: str = LEASE_DIR) -> Lease:
    """Take ``job``'s lease or raise LeaseHeldError naming its holder."""
    path, fs = lease_path(spark, job, folder)
    holder = {"run": uuid.uuid4().hex[:12], "host": socket.gethostname(), "pid": os.getpid(),
              "since": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
              "expires": time.time() + ttl_s, "ttl_s": ttl_s}
    fs.mkdirs(path.getParent())
    for _ in range(3):
        try:
            _write(fs, path, holder, overwrite=False)
            return Lease(job, path, fs, holder)
        except Exception as exc:
            if not _exists_error(exc):
                raise
        current = _read(fs, path)
        if current is not None and float(current.get("expires", 0)) > time.time() \
                and not _died_here(current):
            raise LeaseHeldError(job, current)
        _take_over(fs, path, job, current)
    raise LeaseHeldError(job, _read(fs, path) or {})


def _died_here(holder: dict[str, Any]) -> bool:
    """Whether the holder was a process on this host that no longer runs (killed, crashed):
    its lease need not be waited out."""
    if holder.get("host") == socket.gethostname() and holder.get("pid") == os.getpid():
        return True  # left by this process (its run ended without releasing): not in _held
    return gone_from_this_host(holder)


def _take_over(fs: Any, path: Any, job: str, expired: dict[str, Any] | None) -> None:
    """Remove an expired lease; of several processes doing so at once exactly one does."""
    marker = path.suffix(f".takeover-{(expired or {}).get('run', 'none')}")
    try:
        fs.create(marker, False).close()
    except Exception as exc:
        if _exists_error(exc):
            raise LeaseHeldError(job, expired or {}) from None  # another process takes it
        raise
    try:
        log.warning("job %s: taking over the expired lease of %s", job,
                    _who(expired) if expired else "an unreadable holder")
        fs.delete(path, False)
    finally:
        fs.delete(marker, False)


def _renew(lease: Lease, ttl_s: float, every_s: float) -> None:
    while not lease.stopped.wait(every_s):
        try:
            current = _read(lease.fs, lease.path)
            if current is None or current.get("run") != lease.holder["run"]:
                lease.lost.set()
                log.error("job %s: lease lost to %s", lease.job,
                          _who(current) if current else "nobody")
                return
            lease.holder["expires"] = time.time() + ttl_s
            _write(lease.fs, lease.path, lease.holder, overwrite=True)
        except Exception:  # the next check() decides; a renewal must never kill the run
            log.exception("job %s: could not renew its lease", lease.job)


def release(lease: Lease) -> None:
    lease.stopped.set()
    current = _read(lease.fs, lease.path)
    if current is not None and current.get("run") == lease.holder["run"]:
        lease.fs.delete(lease.path, False)


@contextmanager
def job_lease(spark: SparkSession, job: str, ttl_s: float = TTL_S,
              renew_s: float = RENEW_S) -> Iterator[Lease]:
    """Hold ``job``'s lease (renewed in the background) while the block runs. Re-entrant in
    one process: a run that already holds it (a runner calling a step) just goes on."""
    with _held_lock:
        already = _held.get(job)
    if already is not None:
        yield already
        return
    lease = acquire(spark, job, ttl_s)
    with _held_lock:
        _held[job] = lease
    _renew_in_background(lease, ttl_s, renew_s)
    try:
        yield lease
    finally:
        with _held_lock:
            _held.pop(job, None)
        release(lease)


def claim(spark: SparkSession, name: str, folder: str = CLAIM_DIR, ttl_s: float = TTL_S,
          renew_s: float = RENEW_S) -> Lease:
    """A lease in another folder, held (and renewed) until ``release``: a continuous runner's
    claim on a job between its batches, and its own heartbeat (runner/claims.py). A claim
    decides which runner runs a job; each batch still takes the job's lease."""
    lease = acquire(spark, name, ttl_s, folder)
    _renew_in_background(lease, ttl_s, renew_s)
    return lease


def holder_of(spark: SparkSession, name: str, folder: str = LEASE_DIR) -> dict[str, Any] | None:
    """Who holds the lease ``name`` of ``folder`` now (None: nobody)."""
    path, fs = lease_path(spark, name, folder)
    return _read(fs, path)


def live_holders(spark: SparkSession, folder: str) -> list[dict[str, Any]]:
    """The holders of the unexpired leases of ``folder`` (one whose process died on this host
    counts as expired)."""
    path, fs = lease_path(spark, "", folder)
    if not fs.exists(path):
        return []
    found = []
    for status in fs.listStatus(path):
        if ".takeover-" in status.getPath().getName():
            continue
        holder = _read(fs, status.getPath())
        if holder is not None and float(holder.get("expires", 0)) > time.time() \
                and not gone_from_this_host(holder):
            found.append(holder)
    return found


def _renew_in_background(lease: Lease, ttl_s: float, renew_s: float) -> None:
    threading.Thread(target=_renew, args=(lease, ttl_s, renew_s), name=f"lease-{lease.job}",
                     daemon=True).start()


def check_held(job: str) -> None:
    """Before a commit that moves ``job``'s checkpoint: raise LeaseLostError if this process
    holds the job's lease no more (nothing to check when it runs a step without one)."""
    with _held_lock:
        lease = _held.get(job)
    if lease is not None:
        lease.check()


def holds(job: str) -> bool:
    """Whether this process holds ``job``'s lease (a runner's run, a dbt run's converter)."""
    with _held_lock:
        return job in _held
