"""One run of a job at a time: a lease per job in the warehouse, changed only by compare-and-swap.

Every process that runs a job (``sluice run``, ``sluice ingest``, a runner, another host on the
same warehouse) first takes the job's lease, kept in ``<warehouse>/meta/.sluice_leases/<job>/``
and naming who took it and until when. A second run fails at once, naming the holder. The
holder renews the lease while it runs (every ``RENEW_S``); a lease whose holder died expires
after ``TTL_S`` (at once when the holder was a process on the same host that no longer runs)
and the next run takes it over. Before each commit that moves a checkpoint the holder checks
that the lease is still its own (``check_held``), so a run that lost its lease (paused longer
than the TTL, then taken over) writes nothing more.

How it is kept (issue #35.2). The job's folder holds generation files ``1``, ``2``, ...; the
highest is the lease. Every change (take, take over, renew, release) is one compare-and-swap
from the generation the process read, ``g``, to ``g + 1`` (``_advance``):

1. Publish ``g + 1``, whole, only if absent: on HDFS the rename of a written temporary file
   (refused when the target exists), on a local disk a hard link of one (likewise). Both are
   atomic; Hadoop's ``create(path, overwrite=false)`` is not on a local disk (it checks, then
   opens: two processes can both pass, and the second truncates the first's file). Of all the
   processes that read ``g``, exactly one publishes ``g + 1``; the others learn that their read
   is stale and read again. On S3 it is a conditional put (``If-None-Match: *``: runtime/s3.py).
2. List the folder: a generation above ``g + 1`` means ``g + 1`` could be published only
   because it had been cleaned away, the lease having moved on while this process was paused
   after its read. The process withdraws its file: it has nothing.
3. Delete the generations below ``g + 1``: superseded, never the lease.

The highest generation is never deleted (a release publishes a "released" generation), so
generations only grow and every listing shows the lease. Hence a taker working from a stale
read deletes nobody's lease (it deletes only generations below one it published and found
highest), and a renewal, being the same swap, cannot overwrite a lease taken over while it was
paused: its publish fails and its holder knows it lost. A check that finds its own lease past
half its TTL (its renewals stalled) renews it first, so no take-over can start from a read made
before the check. A listing is taken as a snapshot: a job's folder holds a file or two, listed
in one call (``getdents``, a NameNode call, an S3 LIST), which is why every job has a folder.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NoReturn

from python_ingest.exceptions import SluiceError
from python_ingest.runtime.catalog import WAREHOUSE_CONF
from python_ingest.runtime.processes import gone_from_this_host, host_name
from python_ingest.runtime.s3 import is_s3, put_if_absent

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

LEASE_DIR = "meta/.sluice_leases"  # a dot folder: no catalog takes it for a table or namespace
CLAIM_DIR = "meta/.sluice_claims"  # which continuous runner runs a job (runner/claims.py)
TTL_S = 600.0  # a dead holder's lease expires after this
RENEW_S = 60.0  # a live holder renews this often
FORGET_S = 86400.0  # live_holders removes a name released or expired this long ago
_PUBLISHING = ".pub-"  # a generation's temporary file, before it is published

_held: dict[str, Lease] = {}  # the job leases this process holds, by job
_held_lock = threading.Lock()
_live_runs: set[str] = set()  # the runs of every lease this process holds (claims too)
# each lease's (folder path's) generation this process released last (``Lease.untouched``)
_released: dict[str, int] = {}


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
    """A job's lease held by this process: generation ``gen`` of the folder ``path``."""

    job: str
    path: Any  # the lease's folder (org.apache.hadoop.fs.Path)
    fs: Any  # its FileSystem
    holder: dict[str, Any]
    gen: int = 0
    # taken from this process's own release: nobody else held it (or wrote the job's tables)
    untouched: bool = False
    lost: threading.Event = field(default_factory=threading.Event)
    stopped: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def check(self) -> None:
        """Raise LeaseLostError unless this lease is still this run's; renew it first when
        less than half its TTL is left (the renewals stalled: this process was paused)."""
        with self.lock:
            self._confirm()
            ttl_s = float(self.holder["ttl_s"])
            if float(self.holder["expires"]) - time.time() < ttl_s / 2:
                self._swap_to({**self.holder, "expires": time.time() + ttl_s})

    def renew(self, ttl_s: float) -> None:
        """Push the expiry ``ttl_s`` ahead, by the swap: raise LeaseLostError if another run
        took the lease over, whatever this run last read."""
        with self.lock:
            if self.stopped.is_set():
                return  # released (or being released): never brought back
            self._confirm()
            self._swap_to({**self.holder, "expires": time.time() + ttl_s})

    def _confirm(self) -> None:
        if self.lost.is_set():
            self._lose(_top(self.fs, self.path)[1])
        gen, current = _top(self.fs, self.path)
        if gen != self.gen or current is None or current.get("run") != self.holder["run"]:
            self._lose(current)

    def _swap_to(self, holder: dict[str, Any]) -> None:
        gen = _advance(self.fs, self.path, self.gen, holder)
        if gen is None:
            self._lose(_top(self.fs, self.path)[1])
        self.gen, self.holder = gen, holder

    def _lose(self, current: dict[str, Any] | None) -> NoReturn:
        self.lost.set()
        raise LeaseLostError(self.job, current if current and not current.get("released")
                             else None)


def lease_path(spark: SparkSession, job: str, folder: str = LEASE_DIR) -> tuple[Any, Any]:
    """The folder of ``job``'s lease (of all of ``folder``'s with no job) and its FileSystem."""
    jvm = spark._jvm
    assert jvm is not None
    where = f"{spark.conf.get(WAREHOUSE_CONF)}/{folder}"
    path = jvm.org.apache.hadoop.fs.Path(f"{where}/{job}" if job else where)
    return path, path.getFileSystem(spark._jsc.hadoopConfiguration())


def _child(folder: Any, name: str) -> Any:
    return folder.suffix(f"/{name}")  # Path(folder, name), without a handle on the JVM


def _statuses(fs: Any, folder: Any) -> list[Any]:
    try:
        return list(fs.listStatus(folder))
    except Exception as exc:
        if "FileNotFoundException" in str(exc):
            return []  # never taken
        raise


def _generations(statuses: list[Any]) -> list[int]:
    names = [status.getPath().getName() for status in statuses]
    return sorted(int(name) for name in names if name.isdigit())


def _read(fs: Any, path: Any) -> dict[str, Any] | None:
    try:
        stream = fs.open(path)
        try:  # S3A opens lazily: a file deleted after the open is missed on the first read
            data = bytes(stream.readAllBytes())
        finally:
            stream.close()
    except Exception as exc:
        if "FileNotFoundException" in str(exc):
            return None  # superseded and cleaned away since it was listed
        raise
    try:
        loaded = json.loads(data.decode())
        return loaded if isinstance(loaded, dict) else None
    except ValueError:
        # empty or cut: not something a publish leaves (it is whole or absent), but a disk
        # fault or an older sluice's killed write can. Held for RENEW_S after the file last
        # changed, then expired: never held for ever
        try:
            changed_s = fs.getFileStatus(path).getModificationTime() / 1000
        except Exception:  # gone since it was read
            return None
        return {"run": "?", "expires": changed_s + RENEW_S}


def _top(fs: Any, folder: Any) -> tuple[int, dict[str, Any] | None]:
    """The highest generation and what it holds (0 and None: never taken)."""
    for _ in range(10):
        gens = _generations(_statuses(fs, folder))
        if not gens:
            return 0, None
        found = _read(fs, _child(folder, str(gens[-1])))
        if found is not None:
            return gens[-1], found
        # cleaned away between the listing and the read: a higher one was published
    return gens[-1], None  # the lease moves that fast: a swap from here fails, safely


def _write(fs: Any, path: Any, holder: dict[str, Any]) -> None:
    stream = fs.create(path, False)
    try:
        stream.write(bytearray(json.dumps(holder).encode()))
    finally:
        stream.close()


def _publish(fs: Any, target: Any, holder: dict[str, Any]) -> bool:
    """Create ``target`` holding ``holder``, whole, only if absent: whether this call did."""
    temporary_name = f"{_PUBLISHING}{uuid.uuid4().hex}"
    if fs.getScheme() == "file":
        final = str(fs.makeQualified(target).toUri().getPath())
        temporary = final + temporary_name
        with open(temporary, "xb") as out:
            out.write(json.dumps(holder).encode())
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(temporary, final)  # atomic; refused if final exists, whoever made it
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(temporary)
    if is_s3(fs):  # S3A's rename is a copy: S3's conditional put instead
        return put_if_absent(fs, target, json.dumps(holder).encode())
    temporary_path = target.suffix(temporary_name)
    _write(fs, temporary_path, holder)
    try:
        if fs.rename(temporary_path, target):  # HDFS: atomic, refused if target exists
            return True
        if not fs.exists(target):
            raise SluiceError(
                f"could not create the lease file {target} (the rename of {temporary_path} "
                "was refused): check that its folder is writable (HDFS, local disk, S3)")
        return False
    finally:
        fs.delete(temporary_path, False)


def _advance(fs: Any, folder: Any, gen: int, holder: dict[str, Any]) -> int | None:
    """The compare-and-swap: from generation ``gen`` (what the caller read) to ``gen + 1``
    holding ``holder``. The new generation, or None if another process moved the lease."""
    new = gen + 1
    if not _publish(fs, _child(folder, str(new)), holder):
        return None  # another process published it, from the same read
    statuses = _statuses(fs, folder)
    gens = _generations(statuses)
    if not gens or gens[-1] > new:  # new had been cleaned away: the lease moved on since
        fs.delete(_child(folder, str(new)), False)
        return None
    for old in gens[:-1]:
        fs.delete(_child(folder, str(old)), False)
    stale_s = time.time() - TTL_S
    for status in statuses:  # a publisher killed between writing and publishing
        if _PUBLISHING in status.getPath().getName() \
                and status.getModificationTime() / 1000 < stale_s:
            fs.delete(status.getPath(), False)
    return new


def _live(holder: dict[str, Any]) -> bool:
    return not holder.get("released") and float(holder.get("expires", 0)) > time.time() \
        and not _died_here(holder)


def _died_here(holder: dict[str, Any]) -> bool:
    """Whether the holder was a process on this host that no longer runs (killed, crashed),
    or a run of this process that ended without releasing: its lease need not be waited out."""
    if holder.get("host") == host_name() and holder.get("pid") == os.getpid():
        with _held_lock:
            return holder.get("run") not in _live_runs
    return gone_from_this_host(holder)


def _drop_older_lease_file(fs: Any, path: Any, job: str) -> None:
    """An older sluice kept the lease as one file where the folder now is: honoured while
    live, removed once expired."""
    if not fs.isFile(path):
        return
    current = _read(fs, path)
    if current is not None and _live(current):
        raise LeaseHeldError(job, current)
    fs.delete(path, False)


def acquire(spark: SparkSession, job: str, ttl_s: float = TTL_S,
            folder: str = LEASE_DIR) -> Lease:
    """Take ``job``'s lease or raise LeaseHeldError naming its holder."""
    path, fs = lease_path(spark, job, folder)
    run = uuid.uuid4().hex[:12]
    holder = {"run": run, "host": host_name(), "pid": os.getpid(),
              "since": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
              "expires": time.time() + ttl_s, "ttl_s": ttl_s}
    _drop_older_lease_file(fs, path, job)
    fs.mkdirs(path)
    with _held_lock:  # live before it is published: another thread here must not take it
        _live_runs.add(run)
    current: dict[str, Any] | None = None
    taken: int | None = None
    gen = -1
    try:
        for _ in range(5):
            gen, current = _top(fs, path)
            if current is not None and _live(current):
                break
            taken = _advance(fs, path, gen, holder)
            if taken is not None:
                break
            # another process moved the lease since this one read it: read again
    finally:
        if taken is None:
            with _held_lock:
                _live_runs.discard(run)
    if taken is None:
        raise LeaseHeldError(job, current if current and not current.get("released") else {})
    if current is not None and not current.get("released"):
        log.warning("job %s: took over the expired lease of %s", job, _who(current))
    with _held_lock:
        untouched = _released.get(str(path)) == gen
    return Lease(job, path, fs, holder, taken, untouched)


def _keep_renewed(lease: Lease, ttl_s: float, every_s: float) -> None:
    while not lease.stopped.wait(every_s):
        try:
            lease.renew(ttl_s)
        except LeaseLostError as exc:
            log.error("job %s: %s", lease.job, exc)
            return
        except Exception:  # the next check() decides; a renewal must never kill the run
            log.exception("job %s: could not renew its lease", lease.job)


def release(lease: Lease) -> None:
    """Give the lease up, by the swap: a lease another run took over is left alone."""
    lease.stopped.set()
    with lease.lock:
        try:
            lease._confirm()
            released = _advance(lease.fs, lease.path, lease.gen, {
                **lease.holder, "released": True, "released_at": time.time(), "expires": 0})
            if released is not None:
                with _held_lock:
                    _released[str(lease.path)] = released
        except LeaseLostError:
            pass  # another run holds it now
        finally:
            with _held_lock:
                _live_runs.discard(lease.holder["run"])


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
    current = _top(fs, path)[1]
    return None if current is None or current.get("released") else current


def live_holders(spark: SparkSession, folder: str) -> list[dict[str, Any]]:
    """The holders of the unexpired leases of ``folder`` (one whose process died on this host
    counts as expired). A name released or expired ``FORGET_S`` ago is removed: this is for
    names used once, as the runners' heartbeats."""
    path, fs = lease_path(spark, "", folder)
    found = []
    for status in _statuses(fs, path):
        if not status.isDirectory():
            continue  # an older sluice's lease file
        holder = _top(fs, status.getPath())[1]
        if holder is None:
            continue
        ended_s = float(holder.get("released_at") or holder.get("expires", 0))
        if holder.get("released") or ended_s <= time.time():
            if ended_s < time.time() - FORGET_S:
                fs.delete(status.getPath(), True)
        elif not gone_from_this_host(holder):
            found.append(holder)
    return found


def _renew_in_background(lease: Lease, ttl_s: float, renew_s: float) -> None:
    threading.Thread(target=_keep_renewed, args=(lease, ttl_s, renew_s),
                     name=f"lease-{lease.job}", daemon=True).start()


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
