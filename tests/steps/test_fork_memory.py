"""#35.4: a batch where every one of a million rows fails, forked under a small driver heap.

The fork judges rows in one Spark pass and makes the failing ones error rows on the
executors; the Great Expectations fallback (a type without a SQL form) validates a large batch
in slices, each slice's failing ids handed to Spark before the next. A child process with the
smallest driver heap Spark accepts (512 MB: in local mode the executors share it) forks a
million rows that all fail the suite and commits the error rows into a real error table; then
a batch that all fails an expectation left to Great Expectations, in slices (the budget made
small, so that the batch needs several). Every row must arrive in the error table, once, with
its failures named.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import write_config

pytestmark = [pytest.mark.e2e, pytest.mark.reliability]

ROWS = 1_000_000  # the compiled suite's batch
FALLBACK_ROWS, FALLBACK_BUDGET = 200_000, 50_000  # Great Expectations' batch, in 4 slices

CHILD = textwrap.dedent("""
    import json, logging, sys
    from pathlib import Path
    from python_ingest.config import load_settings
    from python_ingest.runtime.session import build_session
    from python_ingest.steps.fork import split as fork
    from python_ingest.tables.formats import ensure_table, read_table

    logging.basicConfig(level=logging.INFO)
    config, report_dir, runs = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3])
    spark = build_session(load_settings(Path(config), env={}))
    heap = spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory()
    out = {"heap": heap}
    for name, suite_file, rows, budget in runs:
        fork.FALLBACK_ROWS_PER_PASS = budget
        batch = spark.range(rows).selectExpr(
            "cast(id as string) as _row_key", "id as _ref_key", "cast(1 as bigint) as _batch_id",
            "cast(id % 4 as int) as _kafka_partition", "id as _kafka_offset",
            "cast(null as array<string>) as _changed_columns", "false as _is_deleted",
            "cast(null as string) as city", "cast(0 as double) as fare")
        table = f"errors.{name}"
        ensure_table(spark, table, fork.ERROR_COLUMNS)
        parts = fork.split(spark, batch, Path(suite_file), report_dir, "b", f"staging.{name}",
                           f"staging.{name}__valid", table)
        parts.commit_errors(spark, table, 1)
        valid = parts.valid.count()
        parts.release()
        errors = read_table(spark, table)
        out[name] = {"rows": parts.rows, "error_count": parts.error_count, "valid": valid,
                     "in_table": errors.count(),
                     "named": errors.where("error_exception like '%fare%' or "
                                           "error_exception like '%city%'").count(),
                     "distinct": errors.select("_kafka_offset").distinct().count()}
    print(json.dumps(out))
""")


def test_a_million_failing_rows_are_all_routed_under_a_small_driver_heap(
        tmp_path: Path, broker: str) -> None:
    config = write_config(tmp_path / "sluice.yml", tmp_path, broker, {},
                          spark={"master": "local[2]", "conf": {"spark.driver.memory": "512m"}})
    compiled, fallback = tmp_path / "compiled.json", tmp_path / "fallback.json"
    compiled.write_text(json.dumps({"name": "compiled", "expectations": [
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "city"}}]}))
    fallback.write_text(json.dumps({"name": "fallback", "expectations": [
        # Great Expectations' own condition parser has no SQL form in sluice
        {"type": "expect_column_values_to_be_between",
         "kwargs": {"column": "fare", "min_value": 1, "row_condition": 'col("fare")>=0',
                    "condition_parser": "great_expectations"}}]}))
    runs = [("fork_memory", str(compiled), ROWS, FALLBACK_BUDGET),
            ("fork_memory_fallback", str(fallback), FALLBACK_ROWS, FALLBACK_BUDGET)]
    done = subprocess.run([sys.executable, "-c", CHILD, str(config), str(tmp_path / "report"),
                           json.dumps(runs)], capture_output=True, text=True, timeout=900,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-4000:]
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["heap"] < 600 * 1024 * 1024, figures  # the small heap did apply
    assert "validates 200000 rows in 4 slices" in done.stderr  # the budgeted way
    for name, rows in (("fork_memory", ROWS), ("fork_memory_fallback", FALLBACK_ROWS)):
        assert figures[name] == {"rows": rows, "error_count": rows, "valid": 0,
                                 "in_table": rows, "named": rows, "distinct": rows}, name
