"""#9.1: one run of a job at a time. Two runs of one job used to append the same offsets to
raw, fork and merge them twice; now the second fails at once naming the holder, a dead
holder's lease is taken over, and a run that lost its lease commits nothing more."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
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
    path, fs = lease_mod.lease_path(spark, job)
    fs.mkdirs(path.getParent())
    lease_mod._write(fs, path, {"run": "other", "since": "earlier", **holder}, overwrite=True)


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
    path, fs = lease_mod.lease_path(spark, job_name)
    holder = json.loads(bytes(fs.open(path).readAllBytes()).decode())
    assert holder["host"] == "elsewhere"  # the new holder's lease is left alone on release


def test_two_processes_started_together_ingest_once(
        spark: Any, broker: str, make_settings: Any, job_name: str, tmp_path: Path) -> None:
    settings = make_settings({job_name: trips_job(job_name)})
    job = settings.job(job_name)
    produce(broker, job.topic, 300, seed=8, malformed_rate=0)
    config = tmp_path / "sluice.yml"
    runs = [subprocess.Popen([sys.executable, "-m", "python_ingest.cli", "--config", str(config),
                              "ingest", job_name], cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [r.communicate(timeout=300) for r in runs]
    codes = sorted(r.returncode for r in runs)
    # both ingested one after the other (the second found nothing new), or one was refused
    assert codes in ([0, 0], [0, 2]), outputs
    if codes == [0, 2]:
        assert any("is being run by" in err for _, err in outputs), outputs
    checkpoint = read_checkpoint(spark, f"raw.{job.name}")  # (names the table here too)
    assert checkpoint is not None and checkpoint.batch_id == 1
    _, raw_rows, _ = raw_state(spark, job)  # asserts no (partition, offset) landed twice
    assert raw_rows == 300
    assert sluice_cmd(config, "status", job_name).returncode == 0


def test_an_empty_lease_file_left_by_a_killed_process_expires(spark: Any, job_name: str) -> None:
    """A process killed between creating its lease file and writing it leaves it empty: held
    while it may be a renewal in progress, taken over once unchanged for RENEW_S (it was
    held for ever: found with a SIGKILL at a random moment of a runner)."""
    path, fs = lease_mod.lease_path(spark, job_name)
    fs.mkdirs(path.getParent())
    fs.create(path, True).close()  # created, never written
    with pytest.raises(LeaseHeldError), job_lease(spark, job_name):
        pass
    fs.setTimes(path, int((time.time() - lease_mod.RENEW_S - 5) * 1000), -1)
    with job_lease(spark, job_name) as held:
        check_held(job_name)
        assert held.holder["pid"] > 0
