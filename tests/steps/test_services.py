"""Table services by hand (`sluice maintain`): after compaction, cleaning and archival the lake
still equals the source, checkpoints still read, and a change older than a delete that arrives
after the compaction stays dropped. On both table formats."""

from __future__ import annotations

from typing import Any

import pytest

from python_ingest.demo import trips as demo
from python_ingest.demo.trips import Event, TripsGenerator
from python_ingest.kafka import broker as broker_mod
from python_ingest.steps.dbt import Dbt
from python_ingest.steps.pipeline import run_job
from python_ingest.steps.services import maintain_job
from python_ingest.tables.checkpoints import read_checkpoint, step_checkpoint
from tests.conftest import REPO, trips_job
from tests.steps.helpers import as_lake, lake_rows


@pytest.mark.e2e
def test_maintain_keeps_the_lake_and_deleted_rows_stay_deleted(
        format_spark: Any, broker: str, make_settings: Any, project: Any, job_name: str,
        table_format: str) -> None:
    spark = format_spark
    project(job_name)
    settings = make_settings({job_name: trips_job(job_name)}, table_format=table_format)
    job = settings.job(job_name)
    broker_mod.ensure_topic(broker, job.topic, 2)
    dbt = Dbt(settings)
    generator = TripsGenerator(demo.trips_schema(REPO), seed=5, first_trip_id=1,
                               malformed_rate=0.0, duplicate_rate=0.0)
    for _ in range(3):  # three merges: delta commits to compact on Hudi
        demo.produce(broker, job.topic, generator.events(120))
        result = run_job(spark, settings, job, dbt=dbt)
    assert result.tables is not None and result.tables.lake is not None
    tables = result.tables
    deleted = [e for e in generator.history if e.kind == "delete"]
    assert deleted, "the generator deleted no row: the test would prove nothing"

    done = maintain_job(spark, dbt, job)

    assert set(done) >= {tables.raw, tables.lake}
    if table_format == "hudi":  # (small merges rewrite base files: maybe nothing to compact)
        assert any("compacted" in line for line in done[tables.lake])
        assert any("cleaned" in line for line in done[tables.raw])
    expected = {trip_id: as_lake(row) for trip_id, row in generator.rows.items()}
    assert lake_rows(spark, tables.lake) == expected
    assert read_checkpoint(spark, tables.raw).batch_id == 3  # type: ignore[union-attr]
    assert step_checkpoint(spark, tables.lake, "merge") == 3

    # the deleted rows' older changes, re-delivered after the compaction: still deleted
    late = [e for e in generator.history if e.kind in ("create", "update", "partial")
            and int(e.key) in {int(d.key) for d in deleted}]
    assert late
    demo.produce(broker, job.topic, iter(Event(e.key, e.value, "late", e.record) for e in late))
    result = run_job(spark, settings, job, dbt=dbt)
    assert result.counts["landed"] == len(late)
    assert lake_rows(spark, tables.lake) == expected
