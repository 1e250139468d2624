"""A sluice command's console holds the pipeline's own lines only (issue #59.6): no
spark-submit warning per ``hoodie.*`` key, no log4j start-up lines, no JOL attach warnings
(python_ingest/runtime/jvm_logs.py), no Great Expectations or Kafka client chatter."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from python_ingest.demo import trips as demo
from python_ingest.kafka import broker as broker_mod
from tests.conftest import REPO, sluice_cmd, trips_job
from tests.steps.conftest import project  # noqa: F401  (a fixture)

pytestmark = pytest.mark.e2e

NOISE = {
    "spark-submit, per non-Spark key": re.compile("Ignoring non-Spark config property"),
    "JOL (Hudi's object sizes)": re.compile("Unable to attach|Unable to get Instrumentation"),
    "Spark's start as a shell": re.compile("Setting default log level"),
    "log4j's WARN lines": re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d WARN ", re.M),
    "kafka-python": re.compile("blocking the event loop"),
    "Great Expectations": re.compile("Created temporary directory"),
    "librdkafka": re.compile(r"^%\d\|", re.M),
}
# sluice's own log lines (the CLI's format) and the JVM's note of the tests' JVM options
OWN = re.compile(r"^\d\d:\d\d:\d\d (INFO|WARNING) python_ingest\.|^Picked up JAVA_TOOL_OPTIONS")


def test_a_run_prints_the_pipelines_lines_only(
        broker: str, make_settings: Any, project: Any, job_name: str,  # noqa: F811
        tmp_path: Path) -> None:
    """One real ``sluice run`` (Spark, Hudi's merge, the fork, kafka-python's consumer): every
    line on stderr is sluice's own log line, and none of the known noise is anywhere."""
    project(job_name)
    make_settings({job_name: trips_job(job_name)})
    broker_mod.ensure_topic(broker, job_name, 1)
    generator = demo.TripsGenerator(demo.trips_schema(REPO), seed=59, first_trip_id=1)
    demo.produce(broker, job_name, iter(list(generator.events(40))))
    done = sluice_cmd(tmp_path / "sluice.yml", "run", job_name)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{job_name}" in done.stdout
    console = done.stdout + done.stderr
    assert {what for what, pattern in NOISE.items() if pattern.search(console)} == set()
    assert [line for line in done.stderr.splitlines() if line and not OWN.match(line)] == []
