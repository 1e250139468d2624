"""The fork: rows failing the suite go to errors.<job> with every failed expectation; the
rest reach the lake; staging rows of a batch = valid + error rows exactly."""

from __future__ import annotations

import json
from typing import Any

import pytest

from python_ingest.demo.trips import Event, produce
from python_ingest.kafka import broker as broker_mod
from python_ingest.steps.pipeline import run_job
from python_ingest.tables.checkpoints import step_checkpoint
from tests.conftest import trips_job
from tests.steps.helpers import encode, schema


def _event(parsed: Any, trip_id: int, ref: int, **fields: Any) -> Event:
    record = {"trip_id": trip_id, "rider_id": 7, "driver_id": 3, "city": "berlin",
              "status": "requested", "fare": 10.0, "distance_km": 2.0, "requested_at": None,
              "_ref_key": ref, "_changed_columns": None, "_source": "test", "_event_ts": None,
              "_is_deleted": False, "_force_update": False, "_data_center": "dc1"}
    record.update(fields)
    return Event(str(trip_id).encode(), encode(parsed, record), "test", record)


@pytest.mark.e2e
def test_fork_routes_failing_rows_and_reconciles(spark: Any, broker: str, make_settings: Any,
                                                 project: Any,
                                                 job_name: str) -> None:
    parsed = schema()
    project(job_name)
    settings = make_settings({job_name: trips_job(job_name)})
    broker_mod.ensure_topic(broker, job_name, 1)
    events = [
        _event(parsed, 1, 10),                                   # valid
        _event(parsed, 2, 11, fare=-3.0, status="teleported"),  # two failures, one error row
        _event(parsed, 3, 12, rider_id=None),                    # not null fails
        _event(parsed, 4, 13),
        # a partial update is checked only on what it changes: rider_id null is fine here
        _event(parsed, 4, 14, rider_id=None, city=None, driver_id=None, distance_km=None,
               status="completed", fare=None, _changed_columns=["status"]),
        _event(parsed, 1, 15, fare=5000.0, _changed_columns=["fare"]),  # changed and bad
    ]
    produce(broker, job_name, iter(events))
    result = run_job(spark, settings, settings.job(job_name))

    counts = result.counts
    assert counts["read"] == 6 and counts["landed"] == 6
    assert counts["expectation_errors"] == 3 and counts["valid"] == 3
    tables = result.tables
    assert tables is not None
    staged = spark.table(tables.staging).count()
    valid = spark.table(tables.valid).count()
    errors = spark.table(tables.errors).where("error_step = 'fork'").collect()
    assert staged == valid + len(errors) == 6
    by_key = {r["_row_key"]: r for r in errors}
    assert set(by_key) == {"1", "2", "3"}
    assert "fare_amount" in by_key["2"]["error_exception"]
    assert "trip_status" in by_key["2"]["error_exception"]
    assert "rider_id" in by_key["3"]["error_exception"]
    assert json.loads(by_key["2"]["error_source_data"])["trip_status"] == "teleported"
    assert all(r["_batch_id"] == 1 for r in errors)
    lake = {r["trip_id"]: r for r in spark.table(tables.lake).collect()}
    assert set(lake) == {1, 4}
    assert lake[4]["trip_status"] == "completed" and lake[4]["rider_id"] == 7
    assert float(lake[1]["fare_amount"]) == 10.0  # the bad partial never reached the lake
    assert step_checkpoint(spark, tables.valid, "fork") == 1
    assert step_checkpoint(spark, tables.lake, "merge") == 1
    runs = spark.sql(f"select counts, details from meta.runs where run_id = '{result.run_id}'"
                     ).collect()
    assert runs[0]["counts"]["expectation_errors"] == 3
    quality = json.loads(runs[0]["details"])["fork"]["quality"]
    assert {q["column"] for q in quality} >= {"fare_amount", "trip_status", "rider_id"}
    assert result.report and (result.report.endswith("index.html"))
