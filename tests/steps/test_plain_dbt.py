"""A plain `dbt run` in its own process (not the runner's in-process dbt), as a user types it
in a sluice project: dbt's plugin manager loads dbt_sluice, which opens sluice's session, so
the converter reads the raw table another process wrote, whatever the table format. Its lake
model keeps a history (``history=true``): the plain run writes it too (macros/materializations/
sluice_merge_pending.sql calls the history's writer through adapter.sluice_history)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from python_ingest.demo import trips as demo
from python_ingest.kafka import broker as broker_mod
from python_ingest.steps.dbt import Dbt
from python_ingest.steps.history.rules import HISTORY_STEP
from python_ingest.steps.jobs import run_ingest
from python_ingest.steps.pipeline import MERGE_STEP, run_job
from python_ingest.tables import formats
from python_ingest.tables.checkpoints import read_checkpoint, step_checkpoint
from python_ingest.tables.lease import job_lease
from tests.conftest import REPO, trips_job
from tests.history.test_pipeline import _check


def _mart(spark: Any, table: str) -> dict[int, tuple[str, float]]:
    assert formats.table_exists(spark, table)  # (registers a Hudi table dbt's process made)
    rows = spark.sql(f"select trip_id, city_name, fare_amount, _is_deleted from {table}").collect()
    assert not any(r["_is_deleted"] for r in rows)
    return {r["trip_id"]: (r["city_name"], float(r["fare_amount"])) for r in rows}


def _completed(rows: dict[int, dict[str, Any]]) -> dict[int, tuple[str, float]]:
    """The mart's oracle: the source's completed trips."""
    return {trip_id: (row["city"].strip().title(), row["fare"]) for trip_id, row in rows.items()
            if row["status"] == "completed"}


def plain_dbt(root: Path, settings: Any, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SLUICE_CONFIG": str(root / "sluice.yml"),
           "SLUICE_TABLE_FORMAT": settings.table_format,
           "SLUICE_WAREHOUSE": str(settings.path(settings.catalog.warehouse))}
    return subprocess.run([str(Path(sys.executable).parent / "dbt"), *args,
                           "--profiles-dir", str(root)], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.e2e
@pytest.mark.history
def test_plain_dbt_run_builds_the_lake_and_never_beside_a_runner(
        spark: Any, broker: str, make_settings: Any, job_name: str,
        project: Callable[..., Path]) -> None:
    """`dbt run` does the transform half of a job (converter, fork, merge) with the runner's
    checkpoints, and the lake's history; while another run holds the job it leaves the job
    alone."""
    root = project(job_name, mart=True)
    model = root / "models" / "lake" / f"{job_name}.sql"
    model.write_text(model.read_text().replace(
        "config(keep_tombstones=false)",
        "config(keep_tombstones=false, history=true, hard_deletes='new_record')"))
    settings = make_settings({job_name: trips_job(job_name)})
    job = settings.job(job_name)
    broker_mod.ensure_topic(broker, job.topic, 1)
    events = demo.TripsGenerator(demo.trips_schema(REPO), seed=5, malformed_rate=0.0)
    demo.produce(broker, job.topic, events.events(40))
    assert run_ingest(spark, settings, job).landed > 0
    staging, lake = f"staging.stg_test__{job_name}", f"lake.{job_name}"

    with job_lease(spark, job_name):  # what a runner holds while it runs the job
        beside = plain_dbt(root, settings, "run")
    assert beside.returncode == 0, beside.stdout[-3000:] + beside.stderr[-2000:]
    assert "is being run by" in beside.stdout
    assert not formats.table_exists(spark, lake)
    assert not formats.table_exists(spark, staging) or spark.table(staging).count() == 0

    demo.produce(broker, job.topic, events.events(60))  # a second raw batch: two to merge
    assert run_ingest(spark, settings, job).landed > 0
    result = plain_dbt(root, settings, "run")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert formats.table_exists(spark, lake)
    rows = {r.trip_id: r for r in spark.table(lake).collect()}
    assert set(rows) == set(events.rows)  # creates, updates, partials, deletes, duplicates
    for trip_id, row in events.rows.items():
        assert (rows[trip_id].trip_status, float(rows[trip_id].fare_amount)) == \
            (row["status"], row["fare"])
    raw_batch = read_checkpoint(spark, f"raw.{job_name}")
    assert raw_batch is not None and raw_batch.batch_id == 2
    assert step_checkpoint(spark, lake, MERGE_STEP) == 2  # the runner's own checkpoint
    # the history of both batches merged, its current versions the lake
    history = f"lake.{job_name}__history"
    assert formats.table_exists(spark, history)
    assert {v["_batch_id"] for v in _check(spark, lake, history)} == {1, 2}
    assert step_checkpoint(spark, history, HISTORY_STEP) == 2

    mart = f"marts.{job_name}_completed"
    assert _mart(spark, mart) == _completed(events.rows)  # built after the lake, in one run

    # the runner finds nothing left to do: dbt committed what it would have
    after = run_job(spark, settings, job, dbt=Dbt(settings, project=root))
    assert after.outcome == "up-to-date", after.counts
    assert {r.trip_id for r in spark.table(lake).collect()} == set(events.rows)

    # the runner merges a batch of updates and deletes; the next plain `dbt run` brings the
    # mart up to date from the lake's new rows and tombstones, incrementally
    before = _mart(spark, mart)
    demo.produce(broker, job.topic, events.events(80))
    merged = run_job(spark, settings, job, dbt=Dbt(settings, project=root))
    assert merged.counts["deleted"] > 0 and merged.counts["updated"] > 0, merged.counts
    assert {v["_batch_id"] for v in _check(spark, lake, history)} == {1, 2, 3}
    again = plain_dbt(root, settings, "run", "--select", f"{job_name}_completed")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-2000:]
    assert _mart(spark, mart) == _completed(events.rows)
    assert set(before) - set(_mart(spark, mart)), "no completed trip left the mart"

    # commands that need no Spark start none (and so stay fast)
    parsed = plain_dbt(root, settings, "parse")
    assert parsed.returncode == 0, parsed.stdout[-2000:]
    assert "opening sluice's Spark session" not in parsed.stdout + parsed.stderr
