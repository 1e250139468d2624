"""Table services by hand (`sluice maintain`): after compaction, cleaning and archival the lake
still equals the source, checkpoints still read, and a change older than a delete that arrives
after the compaction stays dropped. On both table formats. Inline, per job: the lake's
services run after every ``services.compact_every``-th merged batch."""

from __future__ import annotations

import json
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
    # compaction after every 2nd merge, not Hudi's default 5th: the job's setting must reach
    # the merge's writer
    settings = make_settings({job_name: trips_job(job_name, services={"compact_every": 2})},
                             table_format=table_format)
    job = settings.job(job_name)
    broker_mod.ensure_topic(broker, job.topic, 2)
    dbt = Dbt(settings)
    generator = TripsGenerator(demo.trips_schema(REPO), seed=5, first_trip_id=1,
                               malformed_rate=0.0, duplicate_rate=0.0)
    services = []
    for _ in range(3):  # three merges: delta commits to compact on Hudi
        demo.produce(broker, job.topic, generator.events(120))
        result = run_job(spark, settings, job, dbt=dbt)
        services.append(_services_run(spark, result.run_id))
    assert result.tables is not None and result.tables.lake is not None
    tables = result.tables
    # the lake's services ran after batch 2 only (the index's every 20: never here)
    assert [[s["service"] for s in run] for run in services] == [[], ["compact"], []]
    assert services[1][0]["table"] == tables.lake
    if table_format == "hudi":
        assert any("cleaned" in line for line in services[1][0]["done"])
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


def _services_run(spark: Any, run_id: str) -> list[dict[str, Any]]:
    """The table services a run recorded in meta.runs (``details.services``)."""
    details = spark.sql(f"select details from meta.runs where run_id = '{run_id}'"
                        ).collect()[0]["details"]
    return list(json.loads(details).get("services", []))
