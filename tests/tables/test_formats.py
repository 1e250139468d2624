"""The table-format interface on both formats: rows and commit properties in one commit, read
back newest first; SQL committing with properties; and (Hudi) two processes appending to one
table at once lose no commit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from python_ingest.tables import formats
from tests.conftest import REPO, write_config

WRITER = """
import sys
from python_ingest.config import load_settings
from python_ingest.runtime.session import build_session
from python_ingest.tables.formats import append, ensure_table

spark = build_session(load_settings(sys.argv[1], env={}))
ensure_table(spark, "meta.concurrent_appends", [("n", "bigint"), ("writer", "string")])
for n in range(6):
    df = spark.createDataFrame([(n, sys.argv[2])], "n bigint, writer string")
    append(df, "meta.concurrent_appends", {"sluice.test.n": str(n)})
"""


@pytest.mark.e2e
def test_rows_and_properties_in_one_commit_newest_first(format_spark: Any, table_format: str,
                                                        job_name: str) -> None:
    spark = format_spark
    table = f"meta.{job_name}"
    formats.ensure_table(spark, table, [("id", "bigint")])
    for n in (1, 2):
        df = spark.createDataFrame([(n,)], "id bigint")
        formats.append(df, table, {"sluice.test.batch": str(n)})
    formats.committing(spark, {"sluice.test.batch": "3"},
                       lambda: spark.sql(f"insert into {table} values (3)").collect())
    spark.sql(f"insert into {table} values (4)").collect()  # no properties
    found = [p.get("sluice.test.batch") for p in formats.commit_properties(spark, table)]
    assert found[:4] == [None, "3", "2", "1"], found
    assert sorted(r[0] for r in formats.read_table(spark, table).collect()) == [1, 2, 3, 4]
    assert formats.read_table(spark, table).columns == ["id"]  # no _hoodie_* columns
    assert len(formats.commit_times(spark, table)) >= 4


@pytest.mark.e2e
@pytest.mark.parametrize("table_format", ["hudi"])
def test_two_processes_appending_to_one_hudi_table_lose_nothing(
        format_spark: Any, table_format: str, workdir: Path, broker: str,
        tmp_path: Path) -> None:
    spark = format_spark
    config = write_config(tmp_path / "sluice.yml", workdir, broker, {},
                          table_format=table_format)
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(config), name], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for name in ("a", "b")]
    for writer in writers:
        output, _ = writer.communicate(timeout=300)
        assert writer.returncode == 0, output[-3000:]
    assert formats.table_exists(spark, "meta.concurrent_appends")  # created by another process
    rows = spark.table("meta.concurrent_appends").groupBy("writer").count().collect()
    assert {r["writer"]: r["count"] for r in rows} == {"a": 6, "b": 6}
