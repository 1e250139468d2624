"""sluice on a Spark standalone cluster (issue #12) as an operator runs it: a master and two
workers from pyspark's own ``spark-class`` on 127.0.0.1, the runner's driver pointed at
``spark://``; two jobs through ingest, fork and merge, one worker (and its executor) killed while
a batch is in flight: Spark runs the lost tasks on the other worker, and every lake table ends
equal to its source. On Iceberg, the tables' names in Iceberg's JDBC catalog on a private
PostgreSQL. Hudi (the default format) on a cluster losing a worker is tests/s3/test_s3_cluster.py,
its warehouse on a bucket (a local one here too cost the suite 80 s and tested nothing more).
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from python_ingest.runtime.standalone import LocalCluster
from tests.cluster.jdbc import jdbc_catalog, reader
from tests.conftest import free_port
from tests.runner.fleet import Fleet

pytestmark = [pytest.mark.e2e, pytest.mark.cluster]


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    """Two workers of one core and 2 GiB each (the machine has two cores); per test, as a
    test kills one."""
    started = LocalCluster(workers=2, cores=1, memory="2g").start()
    yield started
    started.stop()


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as page:
        return json.load(page)


def busy_worker(cluster: LocalCluster, ui_port: int) -> int | None:
    """The worker whose executor is running tasks of the runner now (the driver's UI)."""
    try:
        app = get_json(f"http://127.0.0.1:{ui_port}/api/v1/applications")[0]["id"]
        executors = get_json(f"http://127.0.0.1:{ui_port}/api/v1/applications/{app}/executors")
    except (OSError, ValueError, IndexError, KeyError):  # the UI not up yet
        return None
    for executor in executors:
        if executor["id"] != "driver" and executor.get("activeTasks", 0) > 0:
            return cluster.worker_of_executor(executor["id"])
    return None


@pytest.mark.parametrize("table_format", ["iceberg"])
def test_two_jobs_on_a_standalone_cluster_survive_a_lost_worker(
        spark: Any, broker: str, workdir: Path, tmp_path: Path, job_name: str,
        cluster: LocalCluster, postgres: Any, table_format: str) -> None:
    ui_port = free_port()  # the driver's UI: which executor runs tasks now
    config: dict[str, Any] = {
        "table_format": table_format,
        "spark": {"master": cluster.url, "conf": {
            "spark.executor.memory": "1g", "spark.executor.cores": "1", "spark.cores.max": "2",
            "spark.driver.memory": "2g", "spark.task.maxFailures": "4",
            "spark.ui.enabled": "true", "spark.ui.port": str(ui_port)}},
    }
    if table_format == "iceberg":
        catalog = jdbc_catalog(postgres, job_name[-40:], tmp_path / "warehouse")
        config["catalog"] = catalog
    # job_name's counter keeps the two formats' topics apart (the broker outlives a test)
    fleet = Fleet(tmp_path, workdir, broker, f"c{job_name[-22:]}", jobs=2, broken=False,
                  **config)
    fleet.produce(3000)
    runner = fleet.start("--continuous")
    killed = None
    try:
        deadline = time.monotonic() + 300
        while killed is None and time.monotonic() < deadline and runner.poll() is None:
            killed = busy_worker(cluster, ui_port)
            time.sleep(0.1)
        assert killed is not None, \
            "no executor ran a task of the runner:\n" + fleet.last_log(runner)
        assert [a["name"] for a in get_json(f"http://127.0.0.1:{cluster.ui_port}/json/")
                ["activeapps"]] == ["sluice"], "the runner is not an application of the cluster"
        cluster.kill_worker(killed)  # with the executor running the batch's tasks
        fleet.produce(500)
        fleet.wait("both jobs caught up on the one worker left",
                   lambda: all(fleet.caught_up(n) for n in fleet.names), runner)
        runner.send_signal(signal.SIGTERM)
        assert fleet.finish(runner, "stop after SIGTERM") == 0, fleet.last_log(runner)
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
    fleet.assert_exact(spark if table_format == "hudi" else reader(spark, fleet.config))
