"""A plain `dbt run` in its own process (not the runner's in-process dbt), as a user types it
in a sluice project: dbt's plugin manager loads dbt_sluice, which opens sluice's session, so
the converter reads the raw table another process wrote, whatever the table format."""

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
from python_ingest.steps.jobs import run_ingest
from python_ingest.tables import formats
from tests.conftest import REPO, trips_job


def plain_dbt(root: Path, settings: Any, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SLUICE_CONFIG": str(root / "sluice.yml"),
           "SLUICE_TABLE_FORMAT": settings.table_format,
           "SLUICE_WAREHOUSE": str(settings.path(settings.catalog.warehouse))}
    return subprocess.run([str(Path(sys.executable).parent / "dbt"), *args,
                           "--profiles-dir", str(root)], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.e2e
def test_plain_dbt_run_converts_what_sluice_landed_and_leaves_the_lake_to_the_runner(
        spark: Any, broker: str, make_settings: Any, job_name: str,
        project: Callable[..., Path]) -> None:
    root = project(job_name)
    settings = make_settings({job_name: trips_job(job_name)})
    job = settings.job(job_name)
    broker_mod.ensure_topic(broker, job.topic, 1)
    demo.produce(broker, job.topic,
                 demo.TripsGenerator(demo.trips_schema(REPO), seed=5).events(40))
    landed = run_ingest(spark, settings, job).landed
    assert landed > 0

    result = plain_dbt(root, settings, "run")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    staging = f"staging.stg_test__{job_name}"
    assert formats.table_exists(spark, staging)  # written by the dbt process
    assert spark.table(staging).count() == landed
    assert f"skipping lake.{job_name}".lower() in result.stdout.lower()
    assert "lake models are merged by `sluice run" in result.stdout

    # commands that need no Spark start none (and so stay fast)
    parsed = plain_dbt(root, settings, "parse")
    assert parsed.returncode == 0, parsed.stdout[-2000:]
    assert "opening sluice's Spark session" not in parsed.stdout + parsed.stderr
