"""#60: the whole path on a cluster and a bucket. A Spark standalone master and two workers
(pyspark's spark-class on 127.0.0.1) and the warehouse on a private S3 server; two continuous
runners on two "hosts" (``SLUICE_HOST``: the host name sluice records in claims and leases)
share the jobs. First they split them, one each, and each runs batches of its own. Then: the
worker whose executor runs a batch's tasks is SIGKILLed, one runner's driver is SIGKILLed under
a batch and started again on its host, and the S3 server is stopped for 20 s under a batch and
started again. Afterwards every lake table equals its producer's oracle, every offset landed
once, each host's runner ran batches, and no two batches of one job overlapped in time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from python_ingest.runtime.s3proxy import S3Server
from python_ingest.runtime.standalone import LocalCluster
from python_ingest.tables.status import StatusFile
from tests.cluster.test_cluster import busy_worker
from tests.conftest import REPO, free_port
from tests.runner.fleet import Fleet
from tests.s3.conftest import s3_config, s3_reader

pytestmark = [pytest.mark.e2e, pytest.mark.s3, pytest.mark.cluster, pytest.mark.reliability]
OUTAGE_S = 20
EVENTS = 120  # per job, at each step: every step needs a batch, not a big one
WAIT_S = 420


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """Two workers of two (scheduling) cores and 2 GiB: room for each runner's one executor
    on either worker, so a runner whose worker is lost, or that starts again, gets one on the
    worker left."""
    started = LocalCluster(workers=2, cores=2, memory="2g").start()
    yield started
    started.stop()


def start_on_host(fleet: Fleet, host: str, state: Path, ui_port: int,
                  env: dict[str, str]) -> subprocess.Popen[str]:
    """`sluice run --all --continuous` as if on host ``host`` (``SLUICE_HOST``: the name its
    leases and claims record), with its own state folder (status file) and UI port."""
    log = fleet.root / f"runner-{host}-{time.monotonic_ns()}.log"
    conf = f"spark.ui.enabled=true;spark.ui.port={ui_port}"
    runner = subprocess.Popen(
        [sys.executable, "-m", "python_ingest.cli", "--config", str(fleet.config), "run",
         "--all", "--continuous"],
        stdout=open(log, "w"), stderr=subprocess.STDOUT, text=True,  # noqa: SIM115
        env={**fleet.env, **env, "SLUICE_HOST": host, "SLUICE_STATE_DIR": str(state),
             "SLUICE_SPARK_CONF": conf},
        cwd=REPO, start_new_session=True)
    fleet.logs[runner.pid] = log
    return runner


def held(fleet: Fleet, state: Path) -> set[str]:
    """The jobs a runner's status file shows it holding."""
    jobs = StatusFile(state).read().get("jobs") or {}
    return {n for n in fleet.names
            if (jobs.get(n) or {}).get("state") not in (None, "elsewhere", "stopped")}


def landed(fleet: Fleet, state: Path) -> set[str]:
    """The jobs of which a runner with this status file landed a batch."""
    jobs = StatusFile(state).read().get("jobs") or {}
    return {n for n in fleet.names if (jobs.get(n) or {}).get("last_batch")}


def test_two_runners_on_a_cluster_and_a_bucket_survive_a_lost_worker_an_s3_outage_and_a_killed_driver(  # noqa: E501
        spark: Any, broker: str, workdir: Path, tmp_path: Path, job_name: str,
        cluster: LocalCluster, s3: S3Server, bucket: str) -> None:
    env = {**os.environ, **s3.env()}
    warehouse = f"{bucket}/cluster"
    fleet = Fleet(tmp_path, workdir, broker, f"k{job_name[-20:]}", jobs=2, broken=False,
                  catalog=s3_config(s3, warehouse),
                  spark={"master": cluster.url, "conf": {
                      "spark.executor.memory": "768m", "spark.executor.cores": "1",
                      "spark.cores.max": "1", "spark.driver.memory": "1g",
                      "spark.task.maxFailures": "8"}},
                  runner={"poll_interval_s": 0.5, "retry_initial_s": 2, "retry_max_s": 4,
                          "max_parallel_jobs": 2})
    states = {"host-a": tmp_path / "state", "host-b": tmp_path / "state-b"}
    ports = {host: free_port() for host in states}
    fleet.produce(EVENTS)
    runners = {host: start_on_host(fleet, host, states[host], ports[host], env)
               for host in states}

    def running(host: str) -> None:
        if runners[host].poll() is not None:
            pytest.fail(f"runner {host} exited:\n" + fleet.last_log(runners[host]))

    def wait(what: str, predicate: Any) -> None:
        deadline = time.monotonic() + WAIT_S
        while not predicate():
            for host in states:
                running(host)
            if time.monotonic() > deadline:
                pytest.fail(f"not {what} within {WAIT_S} s: " + "\n".join(
                    f"{host}: {StatusFile(state).read()}" for host, state in states.items())
                    + "\n" + fleet.last_log(runners["host-a"]))
            time.sleep(0.2)

    def running_a_batch() -> str:
        """The host whose runner's status shows a batch running (waits for one)."""
        found: list[str] = []

        def any_running() -> bool:
            for host, state in states.items():
                status = StatusFile(state).read()  # the live runner's (not a killed one's)
                if (status.get("runner") or {}).get("pid") == runners[host].pid and any(
                        entry.get("state") == "running"
                        for entry in (status.get("jobs") or {}).values()):
                    found.append(host)
                    return True
            return False

        wait("a runner running a batch", any_running)
        return found[0]

    try:
        # the two hosts split the jobs, one each (a runner that claimed both at start gives
        # one up after its batch); from here each runs batches of its own
        wait("the jobs split between the two hosts", lambda: all(
            len(held(fleet, state)) == 1 for state in states.values())
             and not held(fleet, states["host-a"]) & held(fleet, states["host-b"]))

        # a worker lost while it runs a batch's tasks
        fleet.produce(EVENTS)
        killed: int | None = None

        def a_busy_worker() -> bool:
            nonlocal killed
            for host in states:
                killed = busy_worker(cluster, ports[host])
                if killed is not None:
                    return True
            return False

        wait("an executor running a task", a_busy_worker)
        assert killed is not None
        cluster.kill_worker(killed)

        # the driver (Python and JVM) of a runner running a batch killed, then started again
        # on its host: its job's claim and lease are taken over at once there
        fleet.produce(EVENTS)
        victim = running_a_batch()
        os.killpg(runners[victim].pid, signal.SIGKILL)
        runners[victim].wait()
        runners[victim] = start_on_host(fleet, victim, states[victim], ports[victim], env)

        # the object store gone for 20 s while a batch runs (the restarted runner's, or the
        # other's), then back: S3A's retries, Spark's task retries or the runner's batch
        # retries carry the work on
        fleet.produce(EVENTS)
        running_a_batch()
        s3.stop()
        time.sleep(OUTAGE_S)
        s3.start_again()
        wait("every job caught up", lambda: all(
            any(fleet.caught_up(n, StatusFile(s)) for s in states.values())
            for n in fleet.names))
        for host, runner in runners.items():
            running(host)
            runner.send_signal(signal.SIGTERM)
        for runner in runners.values():
            assert fleet.finish(runner, "stop after SIGTERM") == 0, fleet.last_log(runner)
    finally:
        for runner in runners.values():
            if runner.poll() is None:
                os.killpg(runner.pid, signal.SIGKILL)
        if s3.process is None:
            s3.start_again()

    session = s3_reader(spark, fleet.config, s3)
    fleet.assert_exact(session)
    for host, state in states.items():  # each host's runner landed batches
        assert landed(fleet, state), f"{host} landed no batch: {StatusFile(state).read()}"
    # no two batches of one job at once, whichever host ran them (by its path in the bucket:
    # this process's catalog may already name another meta.runs)
    runs = session.read.format("hudi").load(f"{warehouse}/meta/runs") \
        .where("outcome = 'succeeded'").orderBy("started_at").collect()
    for name in fleet.names:
        times = [(r["started_at"], r["finished_at"]) for r in runs if r["job"] == name]
        assert times, name  # (a killed runner's deferred records are lost with it)
        overlaps = [(a, b) for a, b in zip(times, times[1:], strict=False) if b[0] < a[1]]
        assert not overlaps, f"{name}: batches at once {overlaps}"
