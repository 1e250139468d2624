"""#60: the whole path on a cluster and a bucket. A Spark standalone master and two workers
(pyspark's spark-class on 127.0.0.1) and the warehouse on a private S3 server; two continuous
runners on two "hosts" (each process in UTS and mount namespaces of its own: its own host
name, resolving to 127.0.0.1) share the jobs. While they run: the worker whose executor runs a
batch's tasks is SIGKILLed, one runner's driver is SIGKILLed under a batch and started
again, and the S3 server is stopped for 20 s under a batch and started again. Afterwards every
lake table equals its producer's oracle and every offset landed once.
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
    """`sluice run --all --continuous` as if on host ``host``: its own UTS namespace (the
    leases and claims name the host), its own state folder (status file), its own UI port."""
    log = fleet.root / f"runner-{host}-{time.monotonic_ns()}.log"
    conf = f"spark.ui.enabled=true;spark.ui.port={ui_port}"
    hosts = fleet.root / f"hosts-{host}"  # its name resolves, as a real host's does
    hosts.write_text(Path("/etc/hosts").read_text() + f"\n127.0.0.1 {host}\n")
    runner = subprocess.Popen(
        ["unshare", "--uts", "--mount", "sh", "-c",
         f'hostname {host} && mount --bind {hosts} /etc/hosts && exec "$@"', "sh",
         sys.executable, "-m", "python_ingest.cli", "--config", str(fleet.config), "run",
         "--all", "--continuous"],
        stdout=open(log, "w"), stderr=subprocess.STDOUT, text=True,  # noqa: SIM115
        env={**fleet.env, **env, "SLUICE_STATE_DIR": str(state), "SLUICE_SPARK_CONF": conf},
        cwd=REPO, start_new_session=True)
    fleet.logs[runner.pid] = log
    return runner


def test_two_runners_on_a_cluster_and_a_bucket_survive_a_lost_worker_an_s3_outage_and_a_killed_driver(  # noqa: E501
        spark: Any, broker: str, workdir: Path, tmp_path: Path, job_name: str,
        cluster: LocalCluster, s3: S3Server, bucket: str) -> None:
    env = {**os.environ, **s3.env()}
    fleet = Fleet(tmp_path, workdir, broker, f"k{job_name[-20:]}", jobs=2, broken=False,
                  catalog=s3_config(s3, f"{bucket}/cluster"),
                  spark={"master": cluster.url, "conf": {
                      "spark.executor.memory": "768m", "spark.executor.cores": "1",
                      "spark.cores.max": "1", "spark.driver.memory": "1g",
                      "spark.task.maxFailures": "8"}},
                  runner={"poll_interval_s": 0.5, "retry_initial_s": 2, "retry_max_s": 4,
                          "max_parallel_jobs": 2})
    states = {"host-a": tmp_path / "state", "host-b": tmp_path / "state-b"}
    ports = {host: free_port() for host in states}
    fleet.produce(800)
    runners = {host: start_on_host(fleet, host, states[host], ports[host], env)
               for host in states}

    def caught_up() -> bool:
        return all(any(fleet.caught_up(n, StatusFile(s)) for s in states.values())
                   for n in fleet.names)

    def running(host: str) -> None:
        if runners[host].poll() is not None:
            pytest.fail(f"runner {host} exited:\n" + fleet.last_log(runners[host]))

    def running_a_batch() -> str:
        """The host whose runner's status shows a batch running (waits for one)."""
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            for host, state in states.items():
                status = StatusFile(state).read()  # the live runner's (not a killed one's)
                if (status.get("runner") or {}).get("pid") == runners[host].pid and any(
                        entry.get("state") == "running"
                        for entry in (status.get("jobs") or {}).values()):
                    return host
            time.sleep(0.2)
        pytest.fail("no runner ran a batch:\n" + fleet.last_log(runners["host-a"]))

    try:
        # a worker lost while it runs a batch's tasks
        killed, deadline = None, time.monotonic() + 400
        while killed is None and time.monotonic() < deadline:
            for host in states:
                running(host)
                killed = busy_worker(cluster, ports[host])
                if killed is not None:
                    break
            time.sleep(0.1)
        assert killed is not None, "no executor ran a task:\n" + fleet.last_log(
            runners["host-a"])
        cluster.kill_worker(killed)

        # the driver (Python and JVM) of a runner running a batch killed, then started again
        # on its host: its jobs' claims and leases are taken over at once there
        fleet.produce(300)
        victim = running_a_batch()
        other = next(host for host in states if host != victim)
        os.killpg(runners[victim].pid, signal.SIGKILL)
        runners[victim].wait()
        runners[victim] = start_on_host(fleet, victim, states[victim], ports[victim], env)

        # the object store gone for 20 s while a batch runs (the restarted runner's, or the
        # other's), then back: S3A's retries, Spark's task retries or the runner's batch
        # retries carry the work on
        fleet.produce(300)
        running_a_batch()
        s3.stop()
        time.sleep(OUTAGE_S)
        s3.start_again()
        fleet.wait("every job caught up", caught_up, runners[other])
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
    fleet.assert_exact(s3_reader(spark, fleet.config, s3))
