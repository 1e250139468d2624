"""A fleet of trips jobs for runner and cluster tests: their dbt project and topics, the
producers' oracles, runner processes in their own process groups, and the check that every lake
table equals its source."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from python_ingest.demo import trips as demo
from python_ingest.demo.fleet import topic_of, write_fleet
from python_ingest.kafka.broker import ensure_topic
from python_ingest.tables.formats import table_exists
from python_ingest.tables.runs import flush_records
from python_ingest.tables.status import StatusFile
from tests.conftest import REPO, write_config
from tests.steps.helpers import as_lake, lake_rows

WAIT_S = 420
# what a JVM prints when it dies (Spark's handler, HotSpot's crash report, the heap)
JVM_DEATH = re.compile(r"OutOfMemoryError|fatal error|hs_err_pid|SIGSEGV|SIGBUS|"
                       r"Uncaught exception in thread|exited with code")


class Fleet:
    """Jobs' topics, their producers' oracles and the runner processes."""

    def __init__(self, root: Path, workdir: Path, broker: str, prefix: str, jobs: int = 3,
                 broken: bool = True, services: dict[str, Any] | None = None,
                 **config: Any) -> None:
        """``jobs`` trips jobs (the last one's converter broken when ``broken``), each with
        ``services`` settings when given; ``config`` adds to or replaces keys of the sluice.yml
        written (tests/conftest.write_config)."""
        self.root, self.broker = root, broker
        self.names = [f"{prefix}_{x}" for x in "abcdefgh"[:jobs]]
        self.broken = self.names[-1] if broken else None
        job_configs = write_fleet(root, self.names, broken=[self.broken] if broken else [],
                                  priorities={self.names[0]: 1})
        if services:
            for job in job_configs.values():
                job["services"] = services
        config.setdefault("runner", {"poll_interval_s": 0.5, "retry_initial_s": 2,
                                     "retry_max_s": 4, "max_parallel_jobs": 2})
        self.config = write_config(root / "sluice.yml", workdir, broker, job_configs,
                                   state_dir=str(root / "state"), **config)
        self.status = StatusFile(root / "state")
        self.generators = {}
        self.produced = {n: 0 for n in self.names}
        for i, name in enumerate(self.names):
            ensure_topic(broker, topic_of(name), 2)
            self.generators[name] = demo.TripsGenerator(demo.trips_schema(REPO), seed=i + 1,
                                                        first_trip_id=1)
        self.env = {**os.environ, "SLUICE_DBT_PROJECT_DIR": str(root)}
        self.logs: dict[int, Path] = {}  # each runner's log, by its pid

    def produce(self, events: int) -> None:
        for name in self.names:
            sent = demo.produce(self.broker, topic_of(name),
                                self.generators[name].events(events))
            self.produced[name] += sent

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        path = self.root / f"runner-{time.monotonic_ns()}.log"
        runner = subprocess.Popen(
            [sys.executable, "-m", "python_ingest.cli", "--config", str(self.config), "run",
             "--all", *args], stdout=open(path, "w"), stderr=subprocess.STDOUT,  # noqa: SIM115
            text=True, env={**self.env, **(env or {})}, cwd=REPO, start_new_session=True)
        self.logs[runner.pid] = path
        return runner

    @staticmethod
    def jvms(runner: subprocess.Popen[str]) -> list[int]:
        """The pids of the runner's JVMs (its Spark driver)."""
        return [int(pid) for pid in subprocess.run(
            ["pgrep", "-P", str(runner.pid), "java"], capture_output=True, text=True
        ).stdout.split()]

    def kill_jvm(self, runner: subprocess.Popen[str]) -> int:
        """SIGKILL the runner's Spark JVM alone (its Python goes on until it notices); the
        JVM's pid."""
        jvms = self.jvms(runner)
        assert len(jvms) == 1, f"the runner's JVMs: {jvms}"
        os.kill(jvms[0], signal.SIGKILL)
        return jvms[0]

    def caught_up(self, name: str, status: StatusFile | None = None) -> bool:
        entry = ((status or self.status).read().get("jobs") or {}).get(name) or {}
        offsets = (entry.get("checkpoint") or {}).get("offsets") or {}
        last = entry.get("last_run") or {}
        return (sum(offsets.values()) == self.produced[name] and not entry.get("failures")
                and last.get("outcome") in ("succeeded", "up-to-date")
                and entry.get("state") in ("idle", "stopped"))

    def wait(self, what: str, predicate: Any, runner: subprocess.Popen[str]) -> None:
        deadline = time.monotonic() + WAIT_S
        while not predicate():
            if runner.poll() is not None:
                pytest.fail(f"the runner exited ({runner.returncode}) before {what}:\n"
                            + self.last_log(runner))
            if time.monotonic() > deadline:
                pytest.fail(f"not {what} within {WAIT_S}s: {self.status.read()}\n"
                            + self.diagnose(runner))
            time.sleep(0.5)

    def finish(self, runner: subprocess.Popen[str], what: str) -> int:
        try:
            return runner.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the runner did not {what} within {WAIT_S}s\n" + self.diagnose(runner))

    def diagnose(self, runner: subprocess.Popen[str]) -> str:
        """The runner's Python threads (faulthandler on SIGUSR1) and its JVM's threads."""
        jvm = ""
        if runner.poll() is None:
            runner.send_signal(signal.SIGUSR1)
            for child in self.jvms(runner):
                jvm += subprocess.run(["jstack", str(child)], capture_output=True, text=True,
                                      timeout=60).stdout
            time.sleep(2)
        (self.root / "jstack.txt").write_text(jvm)
        return self.last_log(runner) + f"\n(JVM threads in {self.root / 'jstack.txt'})"

    def last_log(self, runner: subprocess.Popen[str]) -> str:
        """The runner's own log: its tail, after any line in it where a JVM said why it died
        (a tail of Python tracebacks alone hid that in CI)."""
        text = self.logs[runner.pid].read_text()
        last_words = [line for line in text.splitlines() if JVM_DEATH.search(line)][:20]
        head = "JVM lines:\n" + "\n".join(last_words) + "\n...\n" if last_words else ""
        return head + text[-12000:]

    def status_json(self) -> dict[str, Any]:
        # a Spark master that cannot exist: status must answer without starting Spark
        result = subprocess.run(
            [sys.executable, "-m", "python_ingest.cli", "--config", str(self.config), "status",
             "--json"], capture_output=True, text=True, cwd=REPO, timeout=60,
            env={**self.env, "SLUICE_SPARK_MASTER": "spark://no-such-host:1"})
        assert result.returncode == 0, result.stderr
        return dict(json.loads(result.stdout))

    def runs(self, spark: Any, name: str) -> list[tuple[str, dict[str, Any]]]:
        """The job's runs in meta.runs, oldest first: (outcome, details)."""
        from python_ingest.runtime.session import active, project_session

        flush_records()  # the records this process holds (tests/conftest.py)
        with active(project_session(spark)) as session:
            assert table_exists(session, "meta.runs")
            rows = session.sql(f"select outcome, details from meta.runs where job = '{name}' "
                               "order by started_at").collect()
        return [(r["outcome"], json.loads(r["details"] or "{}")) for r in rows]

    def assert_exact(self, spark: Any) -> None:
        """Every lake table equals its source; every offset landed once (raw or raw errors)."""
        for name in self.names:
            for table in (f"lake.{name}", f"raw.{name}", f"errors.{name}__raw"):
                assert table_exists(spark, table), table  # names the runner's tables here
            expected = {t: as_lake(r) for t, r in self.generators[name].rows.items()}
            assert lake_rows(spark, f"lake.{name}") == expected, name
            raw = spark.sql(f"select count(*), count(distinct _kafka_partition, _kafka_offset) "
                            f"from raw.{name}").collect()[0]
            errors = spark.sql(f"select count(*) from errors.{name}__raw").collect()[0][0]
            assert raw[0] == raw[1], f"{name}: {raw[0] - raw[1]} offsets landed twice"
            assert raw[0] + errors == self.produced[name], name
