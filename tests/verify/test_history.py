"""``sluice verify JOB --history``: the history's current versions equal the lake row for row,
and a current version that differs from the lake is reported by key and column."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.feed.history_rows import COLUMNS, create, insert, version
from tests.steps.conftest import write_project

pytestmark = pytest.mark.history


@pytest.mark.parametrize("table_format", ["iceberg"])  # the check is one Spark join: any format
def test_current_versions_equal_the_lake_and_a_difference_is_found(
        format_spark: Any, table_format: str, make_settings: Any, job_name: str,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from python_ingest.cli.main import main
    from tests.conftest import trips_job

    spark = format_spark
    write_project(tmp_path, job_name)
    make_settings({job_name: trips_job(job_name, table_format="iceberg")})
    lake, history = f"lake.{job_name}", f"lake.{job_name}__history"
    create(spark, history, table_format)
    insert(spark, history, [version(1, 10, 0, 1, 10, until=(60, 20, 2)), version(1, 20, 60, 2, 20),
                            version(2, 11, 1, 1, 11), version(3, 12, 2, 1, 12, until=(62, 22, 2)),
                            version(4, 21, 3, 2, None, deleted=True)])
    lake_columns = ", ".join(f"`{n}` {t}" for n, t in COLUMNS[:8])
    spark.sql(f"create table {lake} ({lake_columns}) using iceberg")
    spark.sql(f"insert into {lake} select {', '.join(n for n, _ in COLUMNS[:8])} from "
              f"{history} where _is_current and not _is_deleted")  # trips 1 (ref 20) and 2
    verify = ["--config", str(tmp_path / "sluice.yml"), "verify", job_name, "--history"]

    assert main(verify) == 0
    out = capsys.readouterr().out
    assert f"{job_name}: EQUAL: current versions of {history} (2 rows) vs {lake} (2 rows)" in out

    spark.sql(f"update {history} set fare_amount = 99 where _row_key = '2'")
    spark.sql(f"insert into {lake} select '5', 5, 'Bern', 5.0, 50, false, "
              "timestamp'2026-03-01 10:00:00', 3")  # a lake row the history lacks
    assert main(verify) == 1
    out = capsys.readouterr().out
    assert f"{job_name}: DIFFERENT (2 keys)" in out
    assert "changed  key 2 columns: fare_amount" in out and "missing  key 5" in out
