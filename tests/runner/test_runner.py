"""The continuous runner (``sluice run --all --continuous``) as a user runs it: its own process
and JVM, three jobs on a real broker, one with a broken converter, stopped by SIGTERM and by
SIGKILL, restarted; the lake tables must equal their sources' oracles, no offset landed twice.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from python_ingest.demo.fleet import fix_converter
from python_ingest.tables.status import StatusFile
from tests.runner.fleet import Fleet

pytestmark = [pytest.mark.e2e, pytest.mark.reliability]


def test_runner_isolates_a_failing_job_and_survives_sigterm_and_sigkill(
        spark: Any, broker: str, workdir: Path, tmp_path: Path, job_name: str) -> None:
    # services due after every 2nd batch: the runner runs them apart from the batches
    fleet = Fleet(tmp_path, workdir, broker, job_name[:24],
                  services={"compact_every": 2, "index_compact_every": 2})
    good, broken = fleet.names[:2], fleet.broken
    assert broken is not None
    fleet.produce(150)
    runner = fleet.start("--continuous")
    try:
        # the broken converter fails and is retried; the other two keep flowing
        fleet.wait("two good jobs caught up and the broken one failing",
                   lambda: all(fleet.caught_up(n) for n in good)
                   and ((fleet.status.read()["jobs"].get(broken) or {}).get("failures") or 0)
                   >= 2, runner)
        fleet.produce(100)
        fleet.wait("the good jobs caught up again", lambda: all(fleet.caught_up(n) for n in good),
                   runner)
        fleet.wait("the services due after the 2nd batch ran", lambda: all(
            (fleet.status.read()["jobs"][n].get("services") or {}).get("done") for n in good),
                   runner)
        status = fleet.status_json()
        assert status["runner"]["alive"] is True
        failing = status["jobs"][broken]
        assert failing["state"] in ("failing", "retrying", "running") and failing["failures"] >= 2
        assert "no_such_column_in_raw" in failing["last_error"]
        for name in good:
            assert status["jobs"][name]["backlog"] == 0
            assert status["jobs"][name]["last_batch"]["counts"]["read"] > 0
            assert status["jobs"][name]["freshness_s"] is not None
            services = status["jobs"][name]["services"]
            assert "compact" in services["done"] and services["error"] is None, services
        # fixed: the runner picks the edited model up on the next retry and catches up
        fix_converter(tmp_path, broken)
        fleet.wait("the fixed job caught up", lambda: fleet.caught_up(broken), runner)
        # SIGTERM while a batch is in flight: it finishes, the runner exits cleanly
        fleet.produce(400)
        fleet.wait("a batch in flight", lambda: any(
            (e or {}).get("state") == "running"
            for e in fleet.status.read()["jobs"].values()), runner)
        runner.send_signal(signal.SIGTERM)
        assert fleet.finish(runner, "stop after SIGTERM") == 0, fleet.last_log(runner)
        assert fleet.status.read()["runner"]["state"] == "stopped"
        assert fleet.status_json()["runner"]["alive"] is False
        # SIGKILL at a random moment of the next run's batches (once one is in flight: a
        # fixed 6-24 s sleep spent most of itself on the JVM's start, or after the batches),
        # then a restart that runs until idle
        fleet.produce(300)
        runner = fleet.start("--continuous")
        fleet.wait("a batch of the restarted runner in flight", lambda: any(
            (e or {}).get("state") == "running"
            for e in fleet.status.read()["jobs"].values()), runner)
        time.sleep(random.uniform(0, 4))
        os.killpg(runner.pid, signal.SIGKILL)
        runner.wait(timeout=60)
        runner = fleet.start("--until-idle")
        assert fleet.finish(runner, "catch up after SIGKILL") == 0, fleet.last_log(runner)
        assert all(fleet.caught_up(n) for n in fleet.names), fleet.status.read()
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
    fleet.assert_exact(spark)
    # the table services ran apart from the batches, each recorded as a run of its own
    for name in good:
        runs = fleet.runs(spark, name)
        batches = [d for outcome, d in runs if outcome == "succeeded"]
        services = [d for outcome, d in runs if outcome == "maintained"]
        # 150 and 100 events are a batch each (waited for); the 400 and 300 after them one
        # batch or more, as the SIGTERM and the SIGKILL fall
        assert len(batches) >= 3, runs
        assert not any("services" in d for d in batches), "services ran inside a batch"
        done = {s["service"] for d in services for s in d["services"]}
        assert {"compact", "compact_index", "expire_raw"} <= done, services
        assert all(d["steps"] == ["services"] and d["after_batches"] for d in services)
        assert not [d for outcome, d in runs if outcome == "maintain-failed"], runs
        # what they did: the lake compacted and cleaned, the index down to one entry per key
        done_by = {s["service"]: s for d in services for s in d["services"]}
        assert any(w.startswith("compacted") for w in done_by["compact"]["done"])
        assert any(w.startswith("cleaned") for w in done_by["compact"]["done"])
        index = done_by["compact_index"]
        assert index["entries_after"] < index["entries_before"], index


def test_two_runners_on_one_warehouse_split_the_jobs_and_take_over_from_a_dead_one(
        spark: Any, broker: str, workdir: Path, tmp_path: Path, job_name: str) -> None:
    fleet = Fleet(tmp_path, workdir, broker, job_name[:24], jobs=4, broken=False)
    other = StatusFile(tmp_path / "state-b")  # the second runner's own status file
    fleet.produce(150)
    first = fleet.start("--continuous")
    second = fleet.start("--continuous", env={"SLUICE_STATE_DIR": str(tmp_path / "state-b")})
    runners = [first, second]

    def held(status: StatusFile) -> set[str]:
        jobs = status.read().get("jobs") or {}
        return {n for n in fleet.names if (jobs.get(n) or {}).get("state") not in
                (None, "elsewhere", "stopped")}

    try:
        # both run jobs at once, none held by both; every job caught up by one of them
        fleet.wait("the jobs split between the two runners", lambda: held(fleet.status)
                   and held(other) and not held(fleet.status) & held(other)
                   and len(held(fleet.status) | held(other)) == 4, first)
        fleet.wait("every job caught up", lambda: all(
            fleet.caught_up(n) or fleet.caught_up(n, other) for n in fleet.names), second)
        # the second's status names the first as the runner of the first's jobs
        entries = other.read()["jobs"]
        assert {entries[n]["held_by"]["pid"] for n in held(fleet.status)} == {first.pid}
        # the first runner dies, by its JVM's SIGKILL: it says why and exits; the second takes
        # its jobs over and catches them all up
        jvm = fleet.kill_jvm(first)
        assert first.wait(timeout=60) == 1, fleet.last_log(first)
        assert f"sluice: error: Spark's JVM (pid {jvm}) exited with code -9: killed by " \
            "SIGKILL" in fleet.last_log(first), fleet.last_log(first)
        fleet.produce(100)
        fleet.wait("the second runner caught every job up",
                   lambda: all(fleet.caught_up(n, other) for n in fleet.names), second)
        second.send_signal(signal.SIGTERM)
        assert fleet.finish(second, "stop after SIGTERM") == 0, fleet.last_log(second)
    finally:
        for runner in runners:
            if runner.poll() is None:
                os.killpg(runner.pid, signal.SIGKILL)
    fleet.assert_exact(spark)
