"""#9.1: one run of a job at a time. Two runs of one job used to append the same offsets to
raw, fork and merge them twice; now the second fails at once naming the holder, a dead
holder's lease is taken over, and a run that lost its lease commits nothing more. #35.2:
taking over and renewing are a compare-and-swap, so a stale read can neither delete nor
overwrite the lease of the run that holds it."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from python_ingest.steps.jobs import run_ingest
from python_ingest.tables import lease as lease_mod
from python_ingest.tables.checkpoints import read_checkpoint
from python_ingest.tables.lease import LeaseHeldError, LeaseLostError, check_held, job_lease
from tests.conftest import REPO, sluice_cmd, trips_job
from tests.steps.test_ingest import produce, raw_state

pytestmark = [pytest.mark.e2e, pytest.mark.reliability]


def write_lease(spark: Any, job: str, **holder: Any) -> None:
    """Another process takes the lease, whoever holds it: it publishes the next generation."""
    path, fs = lease_mod.lease_path(spark, job)
    fs.mkdirs(path)
    gen, _ = lease_mod._top(fs, path)
    assert lease_mod._advance(fs, path, gen, {"run": "other", "since": "earlier", **holder})


def test_a_second_run_fails_at_once_naming_the_holder_and_writes_nothing(
        spark: Any, broker: str, make_settings: Any, job_name: str) -> None:
    settings = make_settings({job_name: trips_job(job_name)})
    job = settings.job(job_name)
    produce(broker, job.topic, 40, seed=2, malformed_rate=0)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:  # a live process on this host holds the lease
        write_lease(spark, job.name, host=socket.gethostname(), pid=holder.pid,
                    expires=time.time() + 600)
        with pytest.raises(LeaseHeldError, match=f"job {job_name} is being run by run other "
                           f"\\(pid {holder.pid} on {socket.gethostname()}"):
            run_ingest(spark, settings, job)
        assert read_checkpoint(spark, f"raw.{job.name}") is None
    finally:
        holder.kill()
        holder.wait()
    # its process is gone: the lease is taken over at once, the run goes on
    assert run_ingest(spark, settings, job).read == 40

    # another host's live lease is waited out; its expired one is taken over
    write_lease(spark, job.name, host="elsewhere", pid=1, expires=time.time() + 600)
    with pytest.raises(LeaseHeldError, match="on elsewhere"):
        run_ingest(spark, settings, job)
    write_lease(spark, job.name, host="elsewhere", pid=1, expires=time.time() - 1)
    assert run_ingest(spark, settings, job).up_to_date


def test_a_run_that_lost_its_lease_commits_nothing_more(spark: Any, job_name: str) -> None:
    with job_lease(spark, job_name) as held:
        check_held(job_name)  # still ours
        write_lease(spark, job_name, host="elsewhere", pid=1, expires=time.time() + 600)
        with pytest.raises(LeaseLostError, match=f"this run of job {job_name} lost its lease"):
            check_held(job_name)
        assert held.lost.is_set()
    holder = lease_mod.holder_of(spark, job_name)
    assert holder is not None and holder["host"] == "elsewhere"  # left alone on release


def test_a_lease_taken_from_this_process_s_own_release_is_untouched(
        spark: Any, job_name: str) -> None:
    """``Lease.untouched``: whether nobody held the job since this process released it (the
    run then trusts its catalog's view of the job's tables, pipeline.py); a first take and a
    take after another process's are not."""
    with job_lease(spark, job_name) as held:
        assert not held.untouched  # this process never held it
    with job_lease(spark, job_name) as held:
        assert held.untouched
    write_lease(spark, job_name, host="elsewhere", pid=1, expires=time.time() - 1)
    with job_lease(spark, job_name) as held:  # taken over from another process's
        assert not held.untouched
    with job_lease(spark, job_name) as held:
        assert held.untouched


GATED_CLI = """
import os, sys, time
from pathlib import Path
from python_ingest.tables import lease
gate = Path(sys.argv[1])
take = lease.acquire
def gated_acquire(*args, **kwargs):
    (gate / f"ready-{os.getpid()}").touch()
    while len(list(gate.glob("ready-*"))) < 2:  # both processes take the lease at once
        time.sleep(0.02)
    held = take(*args, **kwargs)
    (gate / f"holds-{os.getpid()}").touch()
    while (gate / "hold").exists():  # and hold it until the test lets go
        time.sleep(0.05)
    return held
lease.acquire = gated_acquire
from python_ingest.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.reliability
def test_two_processes_started_together_ingest_once(
        spark: Any, broker: str, make_settings: Any, job_name: str, tmp_path: Path) -> None:
    """Two `sluice ingest` processes reach the lease at the same moment (both wait for each
    other just before taking it), and the one that takes it holds it until the other has
    ended: one ingests, the other fails naming it. (Before, this test also passed when the
    two runs never overlapped.)"""
    settings = make_settings({job_name: trips_job(job_name)})
    job = settings.job(job_name)
    produce(broker, job.topic, 300, seed=8, malformed_rate=0)
    config = tmp_path / "sluice.yml"
    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "hold").touch()
    logs = [(tmp_path / f"out-{i}", tmp_path / f"err-{i}") for i in range(2)]
    runs = []
    for out, err in logs:
        with out.open("w") as stdout, err.open("w") as stderr:
            runs.append(subprocess.Popen(
                [sys.executable, "-c", GATED_CLI, str(gate), "--config", str(config), "ingest",
                 job_name], cwd=REPO, stdout=stdout, stderr=stderr, text=True))
    try:
        deadline = time.time() + 300
        while not list(gate.glob("holds-*")):
            assert time.time() < deadline and all(r.poll() is None for r in runs), \
                [err.read_text()[-3000:] for _, err in logs]
            time.sleep(0.1)
        holder_pid = int(next(gate.glob("holds-*")).name.split("-")[1])
        winner = next(i for i, r in enumerate(runs) if r.pid == holder_pid)
        loser = 1 - winner
        assert runs[loser].wait(300) == 2, logs[loser][1].read_text()[-3000:]
        assert len(list(gate.glob("ready-*"))) == 2  # both reached the lease together
        refusal = logs[loser][1].read_text()
        assert f"job {job_name} is being run by run " in refusal, refusal[-3000:]
        assert f"(pid {holder_pid} on {socket.gethostname()}" in refusal, refusal[-3000:]
        held = lease_mod.holder_of(spark, job_name)  # the refusal came while it was held
        assert held is not None and held["pid"] == holder_pid
        assert read_checkpoint(spark, f"raw.{job.name}") is None  # the loser wrote nothing
    finally:
        (gate / "hold").unlink()
        for run in runs:
            try:
                run.wait(300)
            except subprocess.TimeoutExpired:
                run.kill()
                run.wait()
    assert runs[winner].returncode == 0, logs[winner][1].read_text()[-3000:]
    checkpoint = read_checkpoint(spark, f"raw.{job.name}")  # (names the table here too)
    assert checkpoint is not None and checkpoint.batch_id == 1
    _, raw_rows, _ = raw_state(spark, job)  # asserts no (partition, offset) landed twice
    assert raw_rows == 300
    assert lease_mod.holder_of(spark, job_name) is None  # released
    assert sluice_cmd(config, "status", job_name).returncode == 0


def test_an_empty_lease_file_left_by_a_killed_process_expires(spark: Any, job_name: str) -> None:
    """A process of an older sluice killed between creating its lease file and writing it left
    it empty (a generation is now published whole or not at all, but a disk fault can still
    cut one): held while it may be a renewal in progress, taken over once unchanged for
    RENEW_S (it was held for ever: found with a SIGKILL at a random moment of a runner)."""
    path, fs = lease_mod.lease_path(spark, job_name)
    fs.mkdirs(path.getParent())
    fs.create(path, True).close()  # the older lease file, where the job's folder goes now
    long_ago = int((time.time() - lease_mod.RENEW_S - 5) * 1000)
    with pytest.raises(LeaseHeldError), job_lease(spark, job_name):
        pass
    fs.setTimes(path, long_ago, -1)
    with job_lease(spark, job_name) as held:
        check_held(job_name)
        assert held.holder["pid"] > 0
    gen, _ = lease_mod._top(fs, path)
    cut = lease_mod._child(path, str(gen + 1))
    fs.create(cut, True).close()  # a cut generation above the released one
    with pytest.raises(LeaseHeldError), job_lease(spark, job_name):
        pass
    fs.setTimes(cut, long_ago, -1)
    with job_lease(spark, job_name) as held:
        check_held(job_name)
        assert held.gen == gen + 2


def test_a_live_lease_file_of_an_older_sluice_is_honoured(spark: Any, job_name: str) -> None:
    """A run of an older sluice (one lease file per job, where the job's folder is now) holds
    the job: refused naming it; once its lease expired, the file makes way for the folder."""
    path, fs = lease_mod.lease_path(spark, job_name)
    fs.mkdirs(path.getParent())
    lease_mod._write(fs, path, {"run": "older", "host": "elsewhere", "pid": 1,
                                "expires": time.time() + 600})
    with pytest.raises(LeaseHeldError, match="run older .*on elsewhere"):
        lease_mod.acquire(spark, job_name)
    fs.delete(path, False)
    lease_mod._write(fs, path, {"run": "older", "host": "elsewhere", "pid": 1,
                                "expires": time.time() - 1})
    with job_lease(spark, job_name) as held:
        check_held(job_name)
        assert fs.getFileStatus(path).isDirectory() and held.gen == 1


@pytest.mark.reliability
def test_takers_of_an_expired_lease_working_from_one_stale_read_leave_one_holder(
        spark: Any, job_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """#35.2: six takers read the same expired lease before any of them writes (each is paused
    between its read and its write until all have read; the first goes on alone, the others
    once it has the lease): one holds it, the others fail naming it, and its lease is still
    there. Before, a taker working from its stale read deleted the lease just taken and took
    it for itself: two holders, each told it had the job."""
    expired = lease_mod.acquire(spark, job_name, ttl_s=0.01)  # a holder paused, never renewing
    time.sleep(0.05)
    takers = 6
    all_read = threading.Barrier(takers, timeout=120)
    first_done = threading.Event()
    paused: set[str] = set()
    read = lease_mod._read

    def read_then_pause(fs: Any, path: Any) -> dict[str, Any] | None:
        found = read(fs, path)
        me = threading.current_thread().name
        if me.startswith("taker-") and me not in paused and found is not None \
                and found.get("run") == expired.holder["run"]:
            paused.add(me)
            all_read.wait()  # every taker has read the expired lease: all reads are stale now
            if me != "taker-0":
                first_done.wait(120)  # taker-0 takes it over; then the others, all at once
        return found

    monkeypatch.setattr(lease_mod, "_read", read_then_pause)
    outcomes: dict[str, Any] = {}

    def take() -> None:
        me = threading.current_thread().name
        try:
            outcomes[me] = lease_mod.acquire(spark, job_name)
        except Exception as exc:  # LeaseHeldError expected; anything else fails below
            outcomes[me] = exc
        finally:
            if me == "taker-0":
                first_done.set()

    threads = [threading.Thread(target=take, name=f"taker-{i}") for i in range(takers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    monkeypatch.undo()
    assert paused == {f"taker-{i}" for i in range(takers)}  # every taker read the stale lease
    holders = [o for o in outcomes.values() if isinstance(o, lease_mod.Lease)]
    assert len(outcomes) == takers and len(holders) == 1, outcomes
    winner = holders[0]
    for outcome in outcomes.values():
        if outcome is not winner:
            assert isinstance(outcome, LeaseHeldError), outcome
            assert outcome.holder["run"] == winner.holder["run"]  # names the one holder
    winner.check()  # no other taker deleted or replaced its lease
    current = lease_mod.holder_of(spark, job_name)
    assert current is not None and current["run"] == winner.holder["run"]
    with pytest.raises(LeaseLostError):
        expired.check()
    lease_mod.release(winner)
    assert lease_mod.holder_of(spark, job_name) is None


@pytest.mark.reliability
def test_a_renewal_racing_a_take_over_loses_the_lease_and_overwrites_nothing(
        spark: Any, job_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """#35.2: the holder's renewal reads its lease, pauses past its expiry, another run takes
    the lease over, then the renewal goes on from its stale read: the holder learns it lost
    the job (check_held raises) and the new holder's lease stays. Before, the renewal
    overwrote the new holder's lease with its own: two holders, both passing their checks."""
    renewal_read, go_on = threading.Event(), threading.Event()
    read = lease_mod._read

    def read_then_pause(fs: Any, path: Any) -> dict[str, Any] | None:
        found = read(fs, path)
        if threading.current_thread().name == f"lease-{job_name}" and not renewal_read.is_set():
            renewal_read.set()
            go_on.wait(120)  # the renewal holds what it read, until the take-over is done
        return found

    monkeypatch.setattr(lease_mod, "_read", read_then_pause)
    with job_lease(spark, job_name, ttl_s=1.0, renew_s=0.2) as held:
        assert renewal_read.wait(60)
        time.sleep(max(0.0, float(held.holder["expires"]) - time.time()) + 0.1)  # expired
        taker = lease_mod.acquire(spark, job_name)  # another run takes the expired lease over
        go_on.set()  # the renewal writes, from its stale read
        for _ in range(50):  # (the renewal's attempt takes milliseconds; 5 s at most)
            if held.lost.is_set():
                break
            time.sleep(0.1)
        with pytest.raises(LeaseLostError, match=f"this run of job {job_name} lost its lease"):
            check_held(job_name)
        taker.check()  # the new holder's lease was neither overwritten nor deleted
        current = lease_mod.holder_of(spark, job_name)
        assert current is not None and current["run"] == taker.holder["run"]
    current = lease_mod.holder_of(spark, job_name)  # the loser's release leaves it alone
    assert current is not None and current["run"] == taker.holder["run"]
    monkeypatch.undo()
    lease_mod.release(taker)
    assert lease_mod.holder_of(spark, job_name) is None
