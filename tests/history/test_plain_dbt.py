"""A plain `dbt run` (its own process, dbt_sluice loaded) of a lake model with ``history=true``
writes the history too: after the lake's merges (macros/materializations/
sluice_merge_pending.sql calls the history's writer through adapter.sluice_history), every
batch merged is in it, and its current versions equal the lake."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from python_ingest.demo import trips as demo
from python_ingest.kafka import broker as broker_mod
from python_ingest.steps.history import HISTORY_STEP
from python_ingest.steps.jobs import run_ingest
from python_ingest.tables import formats
from python_ingest.tables.checkpoints import step_checkpoint
from tests.conftest import REPO, trips_job
from tests.history.test_pipeline import _check
from tests.steps.test_plain_dbt import plain_dbt

pytestmark = [pytest.mark.history, pytest.mark.e2e]


def test_plain_dbt_run_writes_the_history(spark: Any, broker: str, make_settings: Any,
                                          job_name: str, project: Callable[..., Path]) -> None:
    root = project(job_name)
    model = root / "models" / "lake" / f"{job_name}.sql"
    model.write_text(model.read_text().replace(
        "config(keep_tombstones=false)",
        "config(keep_tombstones=false, history=true, hard_deletes='new_record')"))
    settings = make_settings({job_name: trips_job(job_name)})
    job = settings.job(job_name)
    broker_mod.ensure_topic(broker, job.topic, 1)
    events = demo.TripsGenerator(demo.trips_schema(REPO), seed=7, malformed_rate=0.0)
    for count in (40, 30):  # two raw batches: two merges, then the history of both
        demo.produce(broker, job.topic, events.events(count))
        assert run_ingest(spark, settings, job).landed > 0
    result = plain_dbt(root, settings, "run")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    lake, history = f"lake.{job_name}", f"lake.{job_name}__history"
    assert formats.table_exists(spark, lake)  # (registers the tables dbt's process made)
    assert formats.table_exists(spark, history)
    versions = _check(spark, lake, history)
    assert {v["_batch_id"] for v in versions} == {1, 2}
    assert step_checkpoint(spark, history, HISTORY_STEP) == 2
