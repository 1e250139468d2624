"""A job's saved entry (steps/dbt.py): a new process whose dbt project is unchanged takes the
job's models, its lake model's config and the batch path's compiled SQL from
``target/sluice/<job>.json`` instead of importing dbt and parsing the project; an edit of the
project makes the next one parse and compile again."""

from __future__ import annotations

from typing import Any

import pytest

from python_ingest.demo import trips as demo
from python_ingest.kafka import broker as broker_mod
from python_ingest.steps.dbt import Dbt
from python_ingest.steps.pipeline import run_job
from tests.conftest import REPO, trips_job
from tests.steps.helpers import as_lake, lake_rows


@pytest.mark.e2e
def test_a_new_process_reads_the_saved_sql_until_the_project_changes(
        spark: Any, broker: str, make_settings: Any, project: Any, job_name: str) -> None:
    root = project(job_name)
    settings = make_settings({job_name: trips_job(job_name)})
    job = settings.job(job_name)
    broker_mod.ensure_topic(broker, job.topic, 1)
    generator = demo.TripsGenerator(demo.trips_schema(REPO), seed=17, first_trip_id=1)

    def batch(events: int) -> Dbt:
        dbt = Dbt(settings, project=root)  # what a new process starts with
        demo.produce(broker, job.topic, generator.events(events))
        result = run_job(spark, settings, job, dbt=dbt)
        assert result.outcome == "succeeded", result.error
        assert lake_rows(spark, f"lake.{job_name}") == {
            t: as_lake(r) for t, r in generator.rows.items()}
        return dbt

    assert batch(80).parsed  # creates the lake: parses, compiles, saves
    saved = root / "target" / "sluice" / f"{job_name}.json"
    assert saved.is_file()
    assert not batch(50).parsed  # the same project: its saved models and SQL
    model = root / "models" / "lake" / f"{job_name}.sql"
    model.write_text(model.read_text() + "\n-- edited\n")
    assert batch(40).parsed  # an edit: parsed and compiled again, and saved
    assert not batch(30).parsed
