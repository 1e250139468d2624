"""The suite compiled to SQL (steps/fork/expectations.py) judges rows exactly as Great Expectations
does: the same rows fail each expectation, in one Spark pass, with nothing collected on the
driver; a type without a SQL form is left to Great Expectations with a warning naming it."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from python_ingest.steps.fork.expectations import Compiled, compile_suite, failure_name, label
from python_ingest.steps.fork.split import _validate_fallback, judged_suite, split

SUITE = [
    {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "city"}},
    {"type": "expect_column_values_to_be_in_set",
     "kwargs": {"column": "status", "value_set": ["requested", "completed"]}},
    {"type": "expect_column_values_to_not_be_in_set",
     "kwargs": {"column": "status", "value_set": ["teleported"]}},
    {"type": "expect_column_values_to_be_between",
     "kwargs": {"column": "fare", "min_value": 0, "max_value": 100, "strict_min": True}},
    {"type": "expect_column_values_to_be_between",
     "kwargs": {"column": "fare", "max_value": 50, "mostly": 0.5}},
    {"type": "expect_column_values_to_match_regex",
     "kwargs": {"column": "city", "regex": "^[A-Z]"}},
    {"type": "expect_column_values_to_not_match_regex",
     "kwargs": {"column": "city", "regex": "[0-9]"}},
    {"type": "expect_column_value_lengths_to_be_between",
     "kwargs": {"column": "city", "min_value": 3, "max_value": 8}},
    {"type": "expect_column_value_lengths_to_equal", "kwargs": {"column": "code", "value": 2}},
    {"type": "expect_column_values_to_be_unique", "kwargs": {"column": "code"}},
    {"type": "expect_column_values_to_be_null", "kwargs": {"column": "note"}},
    {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "_ref_key"}},
    {"type": "expect_column_values_to_be_between",
     "kwargs": {"column": "fare", "min_value": 10, "row_condition": "status = 'completed'",
                "condition_parser": "spark"}},
]
COLUMNS = ("_batch_id bigint, _kafka_partition int, _kafka_offset bigint, _row_key string, "
           "_ref_key bigint, _is_deleted boolean, _changed_columns array<string>, "
           "city string, status string, fare double, code string, note string")


def _rows() -> list[tuple[Any, ...]]:
    """Rows over two batches whose partitions and offsets repeat (a files job's do)."""
    rows = []
    cities = ["Berlin", "berlin", None, "Paris9", "Ab", "Amsterdam", "Rome", "Oslo"]
    statuses = ["requested", "completed", "teleported", None, "cancelled"]
    for batch in (1, 2):
        for n in range(40):
            deleted = n % 13 == 0
            changed = ["status"] if n % 7 == 0 else (["fare", "city"] if n % 11 == 0 else None)
            rows.append((batch, 0, n, str(n % 30), None if n == 17 else batch * 100 + n,
                         deleted, changed, cities[n % len(cities)],
                         statuses[(n + batch) % len(statuses)],
                         None if n % 9 == 0 else float(n * 3 - 5),
                         None if n % 10 == 0 else f"{n % 25:0{1 + n % 2}d}",
                         "x" if n % 8 == 0 else None))
    return rows


@pytest.mark.e2e
def test_the_compiled_suite_fails_exactly_the_rows_great_expectations_fails(
        spark: Any, tmp_path: Path) -> None:
    batch = spark.createDataFrame(_rows(), COLUMNS)
    suite_file = tmp_path / "s.json"
    suite_file.write_text(json.dumps({"name": "s", "expectations": SUITE}))
    parts = split(spark, batch, suite_file, tmp_path / "reports", "batch-1-2", "staging.s",
                  "staging.s__valid", "errors.s", per_batch=True)
    try:
        assert parts.rows == 80 and parts.rows == parts.valid.count() + parts.errors.count()
        ours: dict[str, set[tuple[int, int, int]]] = {}
        for row in parts.errors.collect():
            for failure in row["error_exception"].removeprefix(
                    "failed expectations: ").split("; "):
                ours.setdefault(failure, set()).add(
                    (row["_batch_id"], row["_kafka_partition"], row["_kafka_offset"]))
        assert parts.batches == [1, 2]
    finally:
        parts.release()

    # Great Expectations' own validation of the same suite on the same rows
    everything = Compiled(fallback=judged_suite(SUITE), fallback_index=list(range(len(SUITE))))
    tagged, results = _validate_fallback(spark, batch, {"name": "s"}, everything)
    theirs: dict[str, set[tuple[int, int, int]]] = {}
    for row in tagged.where("size(__sluice_fallback) > 0").collect():
        for failure in row["__sluice_fallback"]:
            theirs.setdefault(failure, set()).add(
                (row["_batch_id"], row["_kafka_partition"], row["_kafka_offset"]))
    assert ours == theirs
    assert len(ours) >= 9  # most expectations failed some rows
    figures = {(q["index"]): (q["checked"], q["unexpected"]) for q in parts.quality}
    for result in results:
        q = result["figures"]
        assert figures[q["index"]] == (q["checked"], q["unexpected"]), SUITE[q["index"]]


def test_a_type_without_a_sql_form_is_left_to_great_expectations() -> None:
    suite = {"expectations": [
        {"type": "expect_column_values_to_be_increasing", "kwargs": {"column": "fare"}},
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "fare"}},
        {"type": "expect_column_values_to_be_between",
         "kwargs": {"column": "fare", "min_value": 1, "row_condition": 'fare>0',
                    "condition_parser": "great_expectations"}},
        {"type": "expect_table_row_count_to_be_between", "kwargs": {"min_value": 1}},
    ]}
    compiled = compile_suite(suite, ["fare"])
    assert [r.kind for r in compiled.rules] == ["expect_column_values_to_not_be_null"]
    assert compiled.fallback_index == [0, 2]
    assert [t.kind for t in compiled.table_rules] == ["expect_table_row_count_to_be_between"]
    rule = compiled.rules[0]
    assert rule.failure == failure_name("fare", label(rule.kind, rule.kwargs)) == \
        "fare: expect_column_values_to_not_be_null"


@pytest.mark.e2e
def test_the_fallback_warns_naming_the_type_and_routes_its_rows(
        spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    batch = spark.createDataFrame(_rows(), COLUMNS)
    suite_file = tmp_path / "s.json"
    suite_file.write_text(json.dumps({"name": "s", "expectations": [
        {"type": "expect_column_values_to_be_in_type_list",
         "kwargs": {"column": "fare", "type_list": ["StringType"]}},
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "city"}}]}))
    with caplog.at_level(logging.WARNING):
        parts = split(spark, batch, suite_file, tmp_path / "r", "b", "staging.s",
                      "staging.s__valid", "errors.s")
    try:
        assert "expect_column_values_to_be_in_type_list" in caplog.text
        assert parts.rows == parts.valid.count() + parts.errors.count() == 80
    finally:
        parts.release()
