"""The fork: rows failing the suite go to errors.<job> with every failed expectation; the
rest reach the lake; staging rows of a batch = valid + error rows exactly; the batch's report
says what the fork did, offline."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest

from python_ingest.demo.trips import Event, produce
from python_ingest.kafka import broker as broker_mod
from python_ingest.steps.fork.split import error_query, judged_suite
from python_ingest.steps.pipeline import report_dir, run_job
from python_ingest.tables.checkpoints import step_checkpoint
from python_ingest.tables.runs import flush_records
from tests.conftest import trips_job
from tests.reports.conftest import external_assets
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
                                                 project: Any, job_name: str,
                                                 reports_on: None) -> None:
    parsed = schema()
    project(job_name)
    settings = make_settings({job_name: trips_job(job_name, keep_step_tables=True)})
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
    flush_records()  # the records this process holds (tests/conftest.py)
    runs = spark.sql(f"select counts, details from meta.runs where run_id = '{result.run_id}'"
                     ).collect()
    assert runs[0]["counts"]["expectation_errors"] == 3
    quality = json.loads(runs[0]["details"])["fork"]["quality"]
    assert {q["column"] for q in quality} >= {"fare_amount", "trip_status", "rider_id"}
    assert result.report and (result.report.endswith("index.html"))
    assert {q["routed"] for q in quality} >= {1, 2}
    assert all(q["routed"] == q["unexpected"] for q in quality)  # GE judged the fork's rows
    _report_says_what_the_fork_did(spark, report_dir(settings, job_name), tables.errors)


def _report_says_what_the_fork_did(spark: Any, folder: Path, error_table: str) -> None:
    """Per expectation, the batch page's count = the error rows its query lists = the rows
    whose error_exception names it; the partial updates' NULLs count nowhere."""
    pages = list((folder / "validations").rglob("*.html"))
    assert len(pages) == 1
    text = pages[0].read_text()
    assert 'data-rows="6" data-valid="3" data-errors="3"' in text
    shown = {html.unescape(m[0]): (int(m[1]), int(m[2])) for m in re.findall(
        r'data-failure="([^"]*)" data-checked="(\d+)" data-routed="(\d+)"', text)}
    assert len(shown) == 6
    rows = spark.sql(f"select error_exception from {error_table} where error_step = 'fork'"
                     ).collect()
    named = [r[0].removeprefix("failed expectations: ").split("; ") for r in rows]
    for failure, (_, routed) in shown.items():
        query = error_query(error_table, 1, 1, failure)
        assert routed == sum(failure in items for items in named), failure
        assert routed == spark.sql(query).count(), failure
        if routed:  # the count links to the query, shown on the page
            row = re.search(r'data-failure="' + re.escape(html.escape(failure)) + r'".*?</tr>',
                            text)
            assert row, failure
            anchor = re.search(r'<a href="#([\w-]+)">(\d+)</a>', row[0])
            assert anchor and int(anchor[2]) == routed
            assert re.search(f'id="{anchor[1]}"[^>]*>.*?<pre[^>]*>{re.escape(html.escape(query))}'
                             "</pre>", text, re.S)
    # partial updates are judged only on what they change: 4 of the 6 rows on rider_id, and
    # the partial update's NULL rider_id (row 4, ref 14) is no failure
    assert shown["rider_id: expect_column_values_to_not_be_null"] == (4, 1)
    assert shown["city_name: expect_column_values_to_not_be_null"] == (4, 0)
    assert external_assets(folder) == {}
    assert (folder / "static" / "vendor" / "manifest.json").is_file()


def test_the_suite_is_judged_on_the_rows_the_fork_judges() -> None:
    suite = [{"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "city"}},
             {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "_ref_key"}},
             {"type": "expect_table_row_count_to_be_between", "kwargs": {"min_value": 1}},
             {"type": "expect_column_values_to_be_between",
              "kwargs": {"column": "fare", "min_value": 0, "row_condition": "fare > 1",
                         "condition_parser": "spark"}}]
    judged = judged_suite(suite)
    assert judged[0]["kwargs"] == {"column": "city", "condition_parser": "spark", "row_condition":
                                   "NOT `_is_deleted` AND (`_changed_columns` IS NULL OR "
                                   "array_contains(`_changed_columns`, 'city'))"}
    assert judged[1] == suite[1] and judged[2] == suite[2]  # sluice's columns, the table
    assert judged[3]["kwargs"]["row_condition"].startswith("(fare > 1) AND NOT `_is_deleted`")
    assert suite[0]["kwargs"] == {"column": "city"}  # the suite itself is left alone


def test_split_without_the_cache_routes_the_same_rows_and_caches_when_it_must(
        spark: Any, tmp_path: Path) -> None:
    """``persist=False`` (the direct bootstrap's pass): the same counts, valid and error rows
    as the cached split; the rows are cached anyway under a uniqueness rule (a window), or a
    nondeterministic converter (each reader would judge other values)."""
    from python_ingest.steps.fork.split import split

    suite = tmp_path / "suite.json"
    not_null = {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "city"}}
    batch = spark.range(200).selectExpr(
        "cast(id as string) as _row_key", "id as _ref_key", "cast(1 as bigint) as _batch_id",
        "cast(0 as int) as _kafka_partition", "id as _kafka_offset",
        "cast(null as array<string>) as _changed_columns", "false as _is_deleted",
        "if(id % 7 = 0, null, 'x') as city")

    def run(frame: Any, expectations: list[dict[str, Any]], persist: bool) -> tuple[Any, ...]:
        suite.write_text(json.dumps({"name": "s", "expectations": expectations}))
        parts = split(spark, frame, suite, None, "b", "staging.s", "staging.s__valid",
                      "errors.s", persist=persist)
        try:
            return (parts.rows, parts.error_count, sorted(r[0] for r in parts.valid.collect()),
                    sorted(r[0] for r in parts.errors.select("_row_key").collect()),
                    len(parts._persisted))
        finally:
            parts.release()

    cached, fresh = run(batch, [not_null], True), run(batch, [not_null], False)
    assert cached[:4] == fresh[:4] and cached[1] == 29 and len(cached[2]) == 171
    assert (cached[4], fresh[4]) == (1, 0)
    unique = {"type": "expect_column_values_to_be_unique", "kwargs": {"column": "city"}}
    assert run(batch, [not_null, unique], False)[4] == 1
    assert run(batch.selectExpr("*", "rand() as r"),
               [not_null], False)[4] == 1
