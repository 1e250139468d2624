"""Dispersal end to end: the runner merges random batches (inserts, updates, partial updates,
deletes, late re-deliveries, a re-insert of a deleted key) and disperses each to a private
PostgreSQL and a Kafka topic; a dispersal that cannot connect fails its run, the real CLI is
killed before and after the PostgreSQL commit; after the reruns the PostgreSQL table equals
the lake table, and the topic's last value per key is the lake row (null for deleted keys)."""

from __future__ import annotations

import datetime as dt
import io
import signal
from pathlib import Path
from typing import Any

import fastavro
import psycopg
import pytest

from python_ingest.demo import trips as demo
from python_ingest.kafka.broker import ensure_topic
from python_ingest.kafka.client import partition_offsets, read_range
from python_ingest.sinks.changes import target_columns
from python_ingest.sinks.kafka import avro_schema, warehouse
from python_ingest.sinks.pgserver import LocalPostgres
from python_ingest.sinks.state import PositionFile
from python_ingest.steps.dbt import Dbt
from python_ingest.steps.pipeline import run_job
from python_ingest.tables.formats import maintain
from python_ingest.tables.names import JobTables
from python_ingest.tables.runs import last_runs
from tests.conftest import REPO, STATE_DIR, free_port, sluice_cmd, trips_job

pytestmark = [pytest.mark.dispersal, pytest.mark.e2e]
DSN_ENV = "SLUICE_TEST_DISPERSAL_DSN"


def plain(value: Any) -> Any:
    """Values of the three sides made comparable (timestamps as UTC text)."""
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        return aware.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    return value


def lake_state(spark: Any, tables: JobTables) -> dict[str, dict[str, Any]]:
    names = [n for n, _ in target_columns(spark, tables)]
    rows = spark.table(tables.lake).select(*names).collect()
    return {r["_row_key"]: {k: plain(v) for k, v in r.asDict().items()} for r in rows}


def postgres_state(pg: LocalPostgres, table: str) -> dict[str, dict[str, Any]]:
    with psycopg.connect(pg.dsn) as conn:
        cur = conn.execute(f"select * from {table}")
        names = [d.name for d in cur.description or []]
        return {r[0]: {n: plain(v) for n, v in zip(names, r, strict=True)}
                for r in cur.fetchall()}


def postgres_batch(pg: LocalPostgres, job: str) -> int | None:
    with psycopg.connect(pg.dsn) as conn:
        row = conn.execute("select batch_id from sluice_dispersal where job = %s",
                           (job,)).fetchone()
    return None if row is None else int(row[0])


def topic_state(spark: Any, tables: JobTables, bootstrap: str,
                topic: str) -> dict[str, dict[str, Any] | None]:
    """The last value per key of the whole topic, decoded (None: a delete)."""
    schema = fastavro.parse_schema(avro_schema(spark, tables))
    last: dict[str, dict[str, Any] | None] = {}
    for part in partition_offsets(bootstrap, topic):
        for message in read_range("confluent-kafka", bootstrap, topic, part.partition,
                                  part.earliest, part.end, timeout_s=30):
            assert message.key is not None
            value = None if message.value is None else fastavro.schemaless_reader(
                io.BytesIO(message.value), schema, None)
            last[message.key.decode()] = None if value is None else \
                {k: plain(v) for k, v in value.items()}
    return last


@pytest.mark.reliability
def test_postgres_and_kafka_equal_the_lake_after_batches_kills_and_a_failed_dispersal(
        spark: Any, broker: str, postgres: LocalPostgres, make_settings: Any, project: Any,
        job_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    project(job_name)
    topic, table = f"{job_name}.lake", f"mirror.{job_name}"
    monkeypatch.setenv(DSN_ENV, postgres.dsn)  # the DSN from the environment (dsn_env)
    dispersal = {"events": {"type": "kafka", "topic": topic},
                 "mirror": {"type": "postgres", "dsn_env": DSN_ENV, "table": table}}
    settings = make_settings({job_name: trips_job(job_name, dispersal=dispersal)})
    job = settings.job(job_name)
    ensure_topic(broker, job.topic, 2)
    generator = demo.TripsGenerator(demo.trips_schema(REPO), seed=131, first_trip_id=1)
    dbt = Dbt(settings)
    tables = JobTables(job_name, dbt.job_models(job_name))
    config = tmp_path / "sluice.yml"

    def assert_equal(batch: int) -> dict[str, dict[str, Any]]:
        lake = lake_state(spark, tables)
        assert postgres_state(postgres, table) == lake
        assert postgres_batch(postgres, job_name) == batch
        sent = topic_state(spark, tables, broker, topic)
        assert {k: v for k, v in sent.items() if v is not None} == lake
        return lake

    # batch 1: the first dispersal copies the whole lake table
    demo.produce(broker, job.topic, generator.events(200))
    result = run_job(spark, settings, job, dbt=dbt)
    first = assert_equal(1)
    assert result.counts["dispersed_upserted"] == 2 * len(first)  # both targets
    assert result.counts["dispersed_deleted"] == 0

    # batch 2 (updates, deletes, late copies), while PostgreSQL cannot be reached: the merge
    # and Kafka go on, the dispersal to PostgreSQL fails the run and moves no position
    demo.produce(broker, job.topic, iter([*generator.late_events(20),
                                          *generator.events(200)]))
    monkeypatch.setenv(DSN_ENV, f"host=127.0.0.1 port={free_port()} user=x connect_timeout=3")
    failed = run_job(spark, settings, job, dbt=dbt, raise_failure=False)
    assert failed.outcome == "failed" and "cannot connect to PostgreSQL" in (failed.error or "")
    assert last_runs(spark, job_name, 1)[0]["outcome"] == "failed"
    assert postgres_batch(postgres, job_name) == 1 and postgres_state(postgres, table) == first
    stored = PositionFile(STATE_DIR, warehouse(spark), job_name, "events").read()
    assert stored is not None and stored.batch_id == 2
    monkeypatch.setenv(DSN_ENV, postgres.dsn)

    # the lake compacted, cleaned and archived between two dispersals: the incremental read
    # of the next one spans the compaction
    maintain(spark, tables.lake, merged=True)

    # the real CLI killed before its PostgreSQL commit, then right after it
    killed = sluice_cmd(config, "disperse", job_name, "--to", "mirror",
                        env={"SLUICE_FAULT": "disperse_before_commit"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert postgres_batch(postgres, job_name) == 1 and postgres_state(postgres, table) == first
    killed = sluice_cmd(config, "disperse", job_name, "--to", "mirror",
                        env={"SLUICE_FAULT": "disperse_after_commit"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    second = assert_equal(2)
    deleted = sorted(set(first) - set(second))
    assert deleted, "batch 2 deleted no row: pick another seed"
    assert all(topic_state(spark, tables, broker, topic)[k] is None for k in deleted)

    # batch 3: a key deleted in batch 2 comes back, with more changes; the run disperses it
    back = int(deleted[0])
    reinsert = generator._change(back)  # a deleted trip changed again: created anew
    assert reinsert.kind == "create"
    demo.produce(broker, job.topic, iter([reinsert, *generator.events(100)]))
    run_job(spark, settings, job, dbt=dbt)
    third = assert_equal(3)
    assert str(back) in third
    from python_ingest.cli import main as cli  # in this process: no JVM of its own

    capsys.readouterr()
    assert cli.main(["--config", str(config), "disperse", job_name]) == 0
    out = capsys.readouterr().out
    assert f"{job_name} → mirror: up to date at batch 3" in out
    assert f"{job_name} → events: up to date at batch 3" in out


@pytest.mark.parametrize("table_format", ["iceberg"])
def test_postgres_equals_an_iceberg_lake_through_the_runner(
        format_spark: Any, table_format: str, broker: str, postgres: LocalPostgres,
        make_settings: Any, project: Any, job_name: str) -> None:
    """The core equality on Iceberg: merge-on-read MERGE snapshots, the end snapshot read by
    id and narrowed by batch, tombstones; two batches, a key deleted in the first and
    re-inserted in the second."""
    spark = format_spark
    project(job_name)
    table = f"mirror.{job_name}"
    dispersal = {"mirror": {"type": "postgres", "dsn": postgres.dsn, "table": table}}
    settings = make_settings({job_name: trips_job(job_name, dispersal=dispersal)},
                             table_format=table_format)
    job = settings.job(job_name)
    ensure_topic(broker, job.topic, 2)
    generator = demo.TripsGenerator(demo.trips_schema(REPO), seed=137, first_trip_id=1)
    dbt = Dbt(settings)
    tables = JobTables(job_name, dbt.job_models(job_name))
    demo.produce(broker, job.topic, generator.events(300))
    run_job(spark, settings, job, dbt=dbt)
    first = lake_state(spark, tables)
    assert postgres_state(postgres, table) == first and postgres_batch(postgres, job_name) == 1
    gone = sorted(set(map(str, range(1, generator.next_trip_id))) - set(first))
    assert gone, "batch 1 deleted no row: pick another seed"
    reinsert = generator._change(int(gone[0]))
    assert reinsert.kind == "create"
    demo.produce(broker, job.topic, iter([reinsert, *generator.events(200)]))
    result = run_job(spark, settings, job, dbt=dbt)
    second = lake_state(spark, tables)
    assert postgres_state(postgres, table) == second and postgres_batch(postgres, job_name) == 2
    assert gone[0] in second and set(first) - set(second)  # re-inserted; others deleted
    assert result.counts["dispersed_deleted"] == len(set(first) - set(second))
