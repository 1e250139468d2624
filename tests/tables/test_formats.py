"""The table-format interface on both formats: rows and commit properties in one commit, read
back newest first; SQL committing with properties; and (Hudi) two processes appending to one
table at once lose no commit."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from python_ingest.runtime.catalog import location
from python_ingest.tables import formats
from tests.conftest import REPO, write_config

WRITER = """
import sys
import time
from pathlib import Path
from python_ingest.config import load_settings
from python_ingest.runtime.session import build_session
from python_ingest.tables.formats import append, ensure_table

spark = build_session(load_settings(sys.argv[1], env={}))
barrier = Path(sys.argv[3])  # both sessions up before either creates the table: they race
(barrier / sys.argv[2]).touch()
deadline = time.monotonic() + 120
while len(list(barrier.iterdir())) < 2 and time.monotonic() < deadline:
    time.sleep(0.05)
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
    if table_format == "hudi":
        # each file's footer holds a bloom filter sized for its few keys, not Hudi's 430 KB
        # default for 60,000 (runtime/catalog.py BLOOM_ENTRIES), appended by the data source
        # and by SQL alike
        footers = {f.name: footer_bytes(f) for f in Path(location(spark, table)).glob("*.parquet")}
        assert len(footers) >= 4 and max(footers.values()) < 64 * 1024, footers


@pytest.mark.e2e
@pytest.mark.parametrize("table_format", ["hudi"])
def test_two_processes_appending_to_one_hudi_table_lose_nothing(
        format_spark: Any, table_format: str, workdir: Path, broker: str,
        tmp_path: Path) -> None:
    spark = format_spark
    config = write_config(tmp_path / "sluice.yml", workdir, broker, {},
                          table_format=table_format)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(config), name, str(barrier)],
                                cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for name in ("a", "b")]
    for writer in writers:
        output, _ = writer.communicate(timeout=300)
        causes = [line for line in output.splitlines()
                  if "Exception" in line or "Error" in line][:10]
        assert writer.returncode == 0, "\n".join(causes) + "\n...\n" + output[-2000:]
    assert formats.table_exists(spark, "meta.concurrent_appends")  # created by another process
    rows = spark.table("meta.concurrent_appends").groupBy("writer").count().collect()
    assert {r["writer"]: r["count"] for r in rows} == {"a": 6, "b": 6}


def _fail_some_tasks(rows: Any) -> Any:
    """A task that fails after its siblings wrote their files (a read task meeting data loss)."""
    import time

    rows = list(rows)
    if rows and rows[0][0] >= 150:
        time.sleep(2)  # the other tasks' files are written by now
        raise RuntimeError("this task fails")
    return rows


@pytest.mark.e2e
@pytest.mark.reliability
def test_a_failed_first_write_stays_invisible_after_the_next_commit(
        format_spark: Any, table_format: str, job_name: str) -> None:
    """Hudi 1.0 takes files of an instant older than a table's first completed commit for
    committed: the files of a failed first append must not appear once the next one lands."""
    spark = format_spark
    table = f"meta.{job_name}"
    formats.ensure_table(spark, table, [("n", "bigint")])
    rows = spark.sparkContext.parallelize([(n,) for n in range(100, 200)], 4)
    with pytest.raises(Exception, match="this task fails"):
        formats.append(spark.createDataFrame(rows.mapPartitions(_fail_some_tasks), "n bigint"),
                       table, {"sluice.test.batch": "1"})
    assert formats.read_table(spark, table).count() == 0
    formats.append(spark.createDataFrame([(1,)], "n bigint"), table, {"sluice.test.batch": "1"})
    assert [r[0] for r in formats.read_table(spark, table).collect()] == [1]


@pytest.mark.e2e
def test_a_table_of_the_other_format_in_the_warehouse_is_refused_by_name(
        spark: Any, other_format_spark: Any, job_name: str) -> None:
    """Both formats lay tables out as <warehouse>/<namespace>/<table>: switching table_format
    on a warehouse fails before anything is written, naming the table and the fix."""
    from python_ingest.exceptions import ConfigError
    from python_ingest.runtime.catalog import WAREHOUSE_CONF
    from python_ingest.runtime.session import activate

    table = f"meta.{job_name}"
    for writer in (spark, other_format_spark):
        formats.ensure_table(writer, f"{table}_{formats.table_format(writer).name}",
                             [("id", "bigint")])
    activate(spark)  # a Hudi write leaves its session active on this thread
    for writer, other in ((spark, other_format_spark), (other_format_spark, spark)):
        theirs = f"{table}_{formats.table_format(other).name}"
        own_warehouse = writer.conf.get(WAREHOUSE_CONF)
        writer.conf.set(WAREHOUSE_CONF, other.conf.get(WAREHOUSE_CONF))  # the other's folder
        try:
            with pytest.raises(ConfigError, match=f"{theirs}: an .* table already lives at .*"
                               "set table_format .* back to"):
                formats.ensure_table(writer, theirs, [("id", "bigint")])
        finally:
            writer.conf.set(WAREHOUSE_CONF, own_warehouse)
            activate(spark)


@pytest.mark.e2e
@pytest.mark.reliability
def test_a_step_checkpoint_survives_archival_and_its_expiry_is_an_error_never_batch_0(
        format_spark: Any, table_format: str, job_name: str) -> None:
    """#9.10: a step checkpoint whose commit left the active history (Hudi archival, Iceberg
    snapshot expiry) read as 0, so the step re-ran from the start and doubled its rows."""
    from python_ingest.exceptions import StepCheckpointLostError
    from python_ingest.tables.checkpoints import step_checkpoint

    spark = format_spark
    table = f"meta.{job_name}"
    formats.ensure_table(spark, table, [("n", "bigint")])
    formats.append(spark.createDataFrame([(0,)], "n bigint"), table, {"sluice.fork.batch_id": "7"})
    for n in range(1, 6):  # later commits by another step
        formats.append(spark.createDataFrame([(n,)], "n bigint"), table,
                       {"sluice.merge.batch_id": str(n)})
    assert (step_checkpoint(spark, table, "fork"), step_checkpoint(spark, table, "merge"),
            step_checkpoint(spark, table, "never")) == (7, 5, 0)
    if table_format == "hudi":
        spark.sql(f"call archive_commits(table => '{table}', min_commits => 2, "
                  "max_commits => 3, retain_commits => 1)").collect()
        assert len(formats.commit_times(spark, table)) <= 3  # the fork's commit is archived
        assert step_checkpoint(spark, table, "fork") == 7
    else:
        spark.sql(f"call sluice.system.expire_snapshots(table => '{table}', "
                  "older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1)").collect()
        with pytest.raises(StepCheckpointLostError, match=f"table {table}: no commit .* fork"):
            step_checkpoint(spark, table, "fork")
    assert step_checkpoint(spark, table, "merge") == 5


def footer_bytes(path: Path) -> int:
    """The length of a parquet file's footer (its last 8 bytes: the length, then PAR1)."""
    with path.open("rb") as f:
        f.seek(-8, 2)
        length: int = struct.unpack("<i", f.read(4))[0]
    return length
