"""A files job through the whole run: landing dir → raw → staging → fork → lake, with the
staging model, suite and lake model of a Kafka trips job (tests/steps/conftest.py): the raw
rows of a files job have the same shape, so nothing after ingestion changes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from python_ingest.demo.files import trip_records, write_demo_partitions
from python_ingest.reports.data import collect
from python_ingest.steps.dbt import Dbt
from python_ingest.steps.pipeline import JobTables, run_job
from tests.conftest import REPO
from tests.steps.conftest import write_project
from tests.steps.helpers import as_lake, lake_rows

pytestmark = [pytest.mark.files, pytest.mark.e2e]


def test_files_job_runs_through_staging_fork_and_merge_to_the_lake(
        spark: Any, make_settings: Any, job_name: str, tmp_path: Path) -> None:
    landing = write_demo_partitions(tmp_path, hours=4, rows_per_file=10)  # all four formats
    write_project(tmp_path, job_name)
    settings = make_settings({job_name: {
        "source": "files", "path": str(landing), "schema": str(REPO / "schemas/trips.avsc"),
        "row_key": ["trip_id"]}})
    job = settings.job(job_name)
    dbt = Dbt(settings)

    first = run_job(spark, settings, job, dbt=dbt)
    assert first.outcome == "succeeded" and first.batch_id == 1
    assert (first.counts["read"], first.counts["landed"], first.counts["valid"]) == (40, 40, 40)
    assert (first.counts["inserted"], first.counts["decode_errors"]) == (20, 0)
    assert run_job(spark, settings, job, dbt=dbt).outcome == "up-to-date"

    # the lake holds each trip's newest change: hours 05/06 hold trips 1-10 (requested, then
    # accepted), hours 07/08 trips 11-20 likewise
    newest: dict[int, dict[str, Any]] = {}
    for hour in range(4):
        first_trip = 1 + (hour // 2) * 10
        status = ("requested", "accepted")[hour % 2]
        for record in trip_records(first_trip, 10, hour * 10 + 1, status):
            newest[record["trip_id"]] = record
    tables = JobTables(job_name, dbt.job_models(job_name))
    assert tables.lake is not None
    assert lake_rows(spark, tables.lake) == {k: as_lake(v) for k, v in newest.items()}

    # the dashboard's figures: a backlog from the landing dir (no broker asked), the runs
    [report] = collect(spark, settings, [job_name], tables={job_name: tables})
    assert (report.backlog, report.backlog_error, report.raw_error_rows) == (0, None, 0)
    assert [r.outcome for r in report.runs][-2:] == ["succeeded", "up-to-date"]


@pytest.mark.reliability
def test_a_failing_row_of_one_batch_never_takes_the_row_at_its_position_in_another(
        spark: Any, make_settings: Any, job_name: str, tmp_path: Path) -> None:
    """#35.1: a files job's (partition, offset) is (file index, record number): it repeats in
    every batch. Two batches forked at once (ingested first, run later), trip 1 valid in the
    first, trip 2 failing the suite at the same position in the second: only trip 2 is an
    error row, trip 1 reaches the lake (before: both went to the error table)."""
    from python_ingest.demo.files import write_file
    from python_ingest.steps.jobs import run_ingest

    landing = tmp_path / "landing"
    schema = json.loads((REPO / "schemas" / "trips.avsc").read_text())
    write_project(tmp_path, job_name)
    settings = make_settings({job_name: {
        "source": "files", "path": str(landing), "schema": str(REPO / "schemas/trips.avsc"),
        "row_key": ["trip_id"]}})
    job = settings.job(job_name)
    valid, failing = trip_records(1, 1, 1), trip_records(2, 1, 2)
    failing[0]["fare"] = -4.5
    for hour, records in (("00", valid), ("01", failing)):
        part = landing / "dt=2026-01-01" / f"hour={hour}"
        write_file(part / "part-00000.json", records, schema)
        (part / "_SUCCESS").touch()
        assert run_ingest(spark, settings, job).landed == 1
    dbt = Dbt(settings)
    result = run_job(spark, settings, job, dbt=dbt)
    assert result.outcome == "succeeded", result.error
    assert (result.counts["valid"], result.counts["expectation_errors"]) == (1, 1)
    tables = JobTables(job_name, dbt.job_models(job_name))
    assert tables.lake is not None
    assert set(lake_rows(spark, tables.lake)) == {1}
    errors = spark.sql(f"select _row_key, _batch_id from {tables.errors}").collect()
    assert [(r[0], r[1]) for r in errors] == [("2", 2)]
