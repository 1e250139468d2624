"""A lake model's index settings (`lake_index`, `lake_buckets`): a bad value stops the run
before any data moves, with a message naming the model, the key and what to set; a good one
is the lake's. A plain `dbt run` (no sluice run before it) meets the materialization's own
check of the same settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from python_ingest.demo import trips as demo
from python_ingest.demo.trips import TripsGenerator
from python_ingest.exceptions import PipelineError
from python_ingest.kafka import broker as broker_mod
from python_ingest.runtime.catalog import kept_write_settings, location
from python_ingest.steps.dbt import Dbt
from python_ingest.tables.formats import table_exists
from tests.conftest import REPO, trips_job
from tests.steps.helpers import as_lake, configure_lake, lake_rows


@pytest.mark.e2e
@pytest.mark.parametrize("table_format", ["hudi"])
def test_bad_lake_index_settings_stop_the_run_before_data_moves_and_good_ones_are_the_lakes(
        format_spark: Any, broker: str, make_settings: Any, project: Any, job_name: str,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from python_ingest.cli import main as cli

    spark = format_spark
    root = project(job_name)
    lake_sql = root / "models" / "lake" / f"{job_name}.sql"
    settings = make_settings({job_name: trips_job(job_name)})
    job = settings.job(job_name)
    broker_mod.ensure_topic(broker, job.topic, 1)
    generator = TripsGenerator(demo.trips_schema(REPO), seed=29, first_trip_id=1)
    events = generator.events(80)
    demo.produce(broker, job.topic, events)
    run = ["--config", str(tmp_path / "sluice.yml"), "run", job_name]

    for bad, message in (
            (", lake_index='btree'", "lake_index is 'btree'; set it to 'bucket'"),
            (", lake_buckets=0", "lake_buckets is 0; set it to a whole number of buckets"),
            (", lake_buckets='8'", "lake_buckets is '8'; set it to a whole number")):
        configure_lake(lake_sql, bad)
        assert cli.main(run) == 2
        stderr = capsys.readouterr().err
        assert f"lake model {job_name} (models/lake/{job_name}.sql): {message}" in stderr, stderr
        assert not table_exists(spark, f"raw.{job_name}")  # not one event landed

    configure_lake(lake_sql, ", lake_buckets=3")
    assert cli.main(run) == 0, capsys.readouterr().err
    lake = f"lake.{job_name}"
    assert generator.rows  # the source table the events describe, the lake's oracle
    assert lake_rows(spark, lake) == {k: as_lake(row) for k, row in generator.rows.items()}
    path = location(spark, lake)
    assert kept_write_settings(spark, path)["hoodie.bucket.index.num.buckets"] == "3"
    buckets = {r[0][:8] for r in spark.sql(f"select _hoodie_file_name from {lake}").collect()}
    assert 1 <= len(buckets) <= 3  # file groups are named after their bucket's number

    # a new lake built by dbt alone (its converter stages the raw rows the batch path left
    # unstaged): the materialization checks the settings itself
    configure_lake(lake_sql, ", lake_index='btree'")
    spark.sql(f"drop table {lake} purge")
    with pytest.raises(PipelineError, match=r"lake_index is 'btree'; set it to 'bucket'"):
        Dbt(settings).run(f"+{job_name}")
    assert not table_exists(spark, lake)
