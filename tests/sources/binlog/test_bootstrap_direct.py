"""The direct bootstrap (issue #62): a MariaDB table straight into its job's lake by Spark
tasks, then handed over to the tap; the lake ends equal to the table.

Each test fills a table, runs the direct bootstrap (in this process on the tests'
SparkSession, or as the real CLI for the kills), lets the tap and the pipeline carry what
changed since, and compares the lake with the MariaDB table value for value
(tests/sources/binlog/lake.py).
"""

from __future__ import annotations

import json
import threading
from datetime import date
from decimal import Decimal
from typing import Any

import pytest

from python_ingest.exceptions import SluiceError
from tests.conftest import sluice_cmd
from tests.sources.binlog.lake import (
    DOCS,
    DocsWorkload,
    assert_lake_equals_source,
    job_of,
    make_project,
    run_pipeline,
    scaffold,
)
from tests.steps.helpers import assert_index_agrees

pytestmark = pytest.mark.bootstrap
CHUNK = {"chunk_rows_": 25, "wave": 3}  # about six chunks, a seed and two waves


def _direct(env: Any, spark: Any, table: str = "docs", reload: bool = False) -> Any:
    from python_ingest.steps.bootstrap import direct_bootstrap

    settings = env.settings()
    lines: list[str] = []
    result = direct_bootstrap(spark, settings, settings.source(env.source),
                              f"{env.database}.{table}", progress=lines.append, reload=reload,
                              **CHUNK)
    assert any("rows/s" in line and "chunks" in line for line in lines), lines
    assert any("chunks read in the JVM" in line for line in lines), lines  # not in Python
    return result


def _filled(env: Any, steps: int, seed: int = 61) -> Any:
    make_project(env.tmp)
    env.sql(DOCS)
    conn = env.server.root(env.database)
    DocsWorkload(conn, seed=seed).run(steps)  # before the tap ever ran
    scaffold(env)
    return conn


def _index_agrees(spark: Any, env: Any) -> None:
    from python_ingest.tables.names import JobModels, JobTables

    job = job_of(env, "docs")
    assert_index_agrees(spark, JobTables(job, JobModels(f"stg_{job}", job)))


def test_direct_bootstrap_lands_the_table_then_the_stream_follows(tap_env, spark) -> None:
    env = tap_env
    with _filled(env, 300) as conn:
        result = _direct(env, spark)
        assert result.chunks >= 5 and result.rows > 100
        assert assert_lake_equals_source(spark, env, "docs", json_columns=("attrs",)) > 100
        _index_agrees(spark, env)
        with pytest.raises(SluiceError, match="holds rows"):  # a second one: not over rows
            _direct(env, spark)
        DocsWorkload(conn, seed=62, first_id=10_000).run(100)
        env.tap_until_end()
    run_pipeline(spark, env)
    assert assert_lake_equals_source(spark, env, "docs", json_columns=("attrs",)) > 100
    _index_agrees(spark, env)


def test_a_reload_replaces_a_lake_that_drifted_from_its_table(tap_env, spark) -> None:
    """--reload: rows of the lake deleted and changed behind the job's back, and stream
    batches merged since the first bootstrap; the reload drops the lake and its index and
    loads them again from the raw batches it lands (none of the older ones): lake and index
    equal the table, and the stream goes on from the raw table's Kafka positions after it."""
    env = tap_env
    with _filled(env, 300) as conn:
        _direct(env, spark)
        DocsWorkload(conn, seed=65, first_id=40_000).run(40)
        env.tap_until_end()
        run_pipeline(spark, env)
        job = job_of(env, "docs")
        spark.sql(f"delete from lake.{job} where doc_id % 7 = 0")
        spark.sql(f"update lake.{job} set title = 'drifted' where doc_id % 11 = 0")
        with pytest.raises(AssertionError):
            assert_lake_equals_source(spark, env, "docs", json_columns=("attrs",))
        raw_before = spark.sql(f"select max(_batch_id) from raw.{job}").collect()[0][0]
        DocsWorkload(conn, seed=66, first_id=45_000).run(30)  # in the topic, not merged yet
        env.tap_until_end()
        result = _direct(env, spark, reload=True)
        assert result.rows == env.sql("SELECT COUNT(*) FROM docs")[0][0]
        assert assert_lake_equals_source(spark, env, "docs", json_columns=("attrs",)) > 100
        _index_agrees(spark, env)
        landed = spark.sql(f"select min(_batch_id) from raw.{job} where _source like "
                           "'%bootstrap%'" f" and _batch_id > {raw_before}").collect()[0][0]
        assert landed == raw_before + 1  # the raw table's batches go on, none replaced
        DocsWorkload(conn, seed=67, first_id=50_000).run(30)
        env.tap_until_end()
    run_pipeline(spark, env)
    assert assert_lake_equals_source(spark, env, "docs", json_columns=("attrs",)) > 100
    _index_agrees(spark, env)


def test_direct_bootstrap_under_concurrent_writes_ends_equal(tap_env, format_spark,
                                                             table_format) -> None:
    """On both table formats, a workload writing during the whole bootstrap."""
    env, spark = tap_env, format_spark
    env.table_format = table_format
    env.write_config()
    with _filled(env, 300) as conn:
        stop = threading.Event()

        def write() -> None:
            with env.server.root(env.database) as other:
                workload = DocsWorkload(other, seed=63, first_id=20_000)
                while not stop.is_set():
                    workload.step()

        writer = threading.Thread(target=write)
        writer.start()
        try:
            _direct(env, spark)
        finally:
            stop.set()
            writer.join()
        DocsWorkload(conn, seed=64, first_id=30_000).run(20)
        env.tap_until_end()
    run_pipeline(spark, env)
    assert assert_lake_equals_source(spark, env, "docs", json_columns=("attrs",)) > 100


def test_a_killed_direct_bootstrap_resumes_by_chunk(tap_env, spark) -> None:
    """The real CLI SIGKILLed after its first bulk wave's raw commit, then after the index's
    commit; the third run finishes: every source row landed once, the lake equals the table."""
    env = tap_env
    with _filled(env, 300):
        args = ("bootstrap", env.source, f"{env.database}.docs", "--direct",
                "--chunk-rows", "25", "--wave", "2")
        for fault in ("bootstrap_after_wave", "bootstrap_after_index"):
            killed = sluice_cmd(env.config, *args, env={"SLUICE_FAULT": fault})
            assert killed.returncode == -9, killed.stdout + killed.stderr
        done = sluice_cmd(env.config, *args)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "resuming" in done.stdout and "straight into" in done.stdout, done.stdout
        assert "chunks read in the JVM" in done.stdout, done.stdout
    job = job_of(env, "docs")
    run_pipeline(spark, env)  # nothing new in the topic: names the tables here, merges nothing
    landed = spark.sql(f"select count(*), count(distinct _row_key) from raw.{job}").collect()[0]
    source = env.sql("SELECT COUNT(*) FROM docs")[0][0]
    assert tuple(landed) == (source, source)  # no chunk lost, none landed twice
    assert assert_lake_equals_source(spark, env, "docs", json_columns=("attrs",)) > 100
    _index_agrees(spark, env)


def test_failing_rows_land_in_the_error_table_and_replay(tap_env, spark) -> None:
    """Rows the suite fails go to errors.<job> with their raw rows; fixed suite, replayed:
    the lake equals the table."""
    from python_ingest.replay.replay import Selection, replay

    env = tap_env
    with _filled(env, 300):
        suite_file = next((env.tmp / "expectations").glob("*docs.json"))
        suite = json.loads(suite_file.read_text())
        kept = list(suite["expectations"])
        suite["expectations"] = kept + [{"type": "expect_column_values_to_be_between",
                                         "kwargs": {"column": "score", "min_value": 0}}]
        suite_file.write_text(json.dumps(suite))
        result = _direct(env, spark)
        job = job_of(env, "docs")
        failing = env.sql("SELECT COUNT(*) FROM docs WHERE score < 0")[0][0]
        assert failing > 5 and result.errors == failing
        errors = spark.sql(f"select count(*) from errors.{job} where error_step = 'fork'")
        assert errors.collect()[0][0] == failing
        suite["expectations"] = kept
        suite_file.write_text(json.dumps(suite))
        settings = env.settings()
        replayed = replay(spark, settings, settings.job(job), Selection())
        assert replayed.replayed == failing
    assert assert_lake_equals_source(spark, env, "docs", json_columns=("attrs",)) > 100


def test_a_table_without_a_job_is_refused(tap_env, spark) -> None:
    env = tap_env
    make_project(env.tmp)
    env.sql(DOCS)
    with pytest.raises(SluiceError, match="scaffold"):
        _direct(env, spark)


def test_a_plan_keeps_its_chunks_and_position() -> None:
    from python_ingest.sources.binlog.position import BinlogPosition
    from python_ingest.sources.tap.chunks import Chunk
    from python_ingest.steps.bootstrap import Plan

    chunks = (Chunk(0, None, (1, "a|b")), Chunk(1, (1, "a|b"), (date(2024, 1, 2), b"\x00")),
              Chunk(2, (Decimal("1.50"), "é"), None))
    plan = Plan("id", "db.t", BinlogPosition("binlog.000007", 1234), "0-1-9", chunks)
    assert Plan.from_json(plan.to_json()) == plan
    lsn = Plan("id", "public.t", 0x1_6B37_4D48, None, chunks, first=12)  # PostgreSQL's P0
    assert Plan.from_json(lsn.to_json()) == lsn
    older = json.loads(plan.to_json())
    del older["first"]  # a plan file written before --reload: the finish starts where it did
    assert Plan.from_json(json.dumps(older)).first == 0


def test_the_lake_write_skips_combining_only_for_one_row_per_key() -> None:
    """The bulk lake write leaves out Hudi's combine (a shuffle by key, about a third of the
    write at 1M rows: docs/bootstrap.md) only where every row has its own ``_row_key``: a
    primary or unique key, not synthetic, its text injective; declared key columns may
    repeat, as may a legacy joined text of several text columns."""
    from python_ingest.changelog.schema import JOINED, JSON_KEYS
    from python_ingest.sources.tap.columns import ColumnSpec
    from python_ingest.sources.tap.registry import KeyChoice, TableShape
    from python_ingest.steps.bootstrap import one_row_per_key

    columns = (ColumnSpec("id", "long", "long", nullable=False),
               ColumnSpec("part", "long", "long", nullable=False),
               ColumnSpec("name", "string", "string", nullable=False))

    def shape(kind: str, keys: tuple[str, ...], synthetic: bool = False) -> TableShape:
        return TableShape("db", "t", columns, KeyChoice(kind, keys, synthetic, None))

    assert one_row_per_key(shape("primary", ("id",)), JOINED)
    assert one_row_per_key(shape("unique", ("id", "name")), JSON_KEYS)
    assert one_row_per_key(shape("primary", ("id", "part")), JOINED)
    assert not one_row_per_key(shape("primary", ("id", "name")), JOINED)
    assert not one_row_per_key(shape("columns", ("id",)), JSON_KEYS)
    assert not one_row_per_key(shape("primary", ("name",), synthetic=True), JSON_KEYS)
    assert not one_row_per_key(shape("row", ()), JSON_KEYS)


def test_the_jvm_reads_dates_as_the_tap_does(spark) -> None:
    """The JVM read's day count (jdbc_read.py, Spark SQL over the server's year, month and
    day, any integer type) equals the tap's: valid dates, leap days, year 0, zero and partial
    zero dates (NULL in a nullable column, zero_day's day in a NOT NULL one)."""
    from python_ingest.sources.binlog.jdbc_read import _days
    from python_ingest.sources.binlog.values import valid_date, zero_day
    from python_ingest.sources.tap.values import days_from_civil

    rows = [(y, m, d) for y in (0, 4, 100, 1900, 1969, 2000, 2024, 9999)
            for m in (0, 1, 2, 3, 12) for d in (0, 1, 29, 30, 31)] + [(None, None, None)]
    frame = spark.createDataFrame(rows, "c__0 bigint, c__1 bigint, c__2 bigint")
    for nullable in (True, False):
        got = frame.selectExpr("c__0", "c__1", "c__2", f"{_days('c', nullable)} AS v").collect()
        for y, m, d, v in got:
            want = None if y is None else days_from_civil(y, m, d) if valid_date(y, m, d) \
                else None if nullable else zero_day(y, m, d)
            assert v == want, (y, m, d, nullable)


def test_a_key_that_may_be_null_is_read_as_one_chunk(tap_env) -> None:
    """A ``key_columns`` entry naming a nullable column: a NULL key compares as unknown, so
    its row would be in no key range (both bootstrap roads read by these chunks): the table is
    one chunk, and the chunks read every row."""
    from python_ingest.sources.binlog import server
    from python_ingest.sources.binlog.bootstrap import chunk_bounds, chunk_predicate

    env = tap_env
    env.write_config(key_columns={f"{env.database}.kn": ["a", "b"]})
    env.sql("CREATE TABLE kn (id INT PRIMARY KEY, a INT NOT NULL, b INT NULL)",
            "INSERT INTO kn SELECT seq, seq DIV 3, IF(seq % 4 = 0, NULL, seq) FROM seq_1_to_100")
    settings = env.settings()
    with env.server.root(env.database) as conn, conn.cursor() as cur:
        shape = server.table_shape(conn, env.database, "kn", settings.source(env.source), None)
        assert shape.key.columns == ("a", "b")
        read = 0
        for chunk in chunk_bounds(conn, shape, 10):
            where, params = chunk_predicate(shape.key.columns, chunk)
            cur.execute(f"SELECT COUNT(*) FROM kn WHERE {where}", params)
            read += cur.fetchone()[0]
        assert read == 100
        cur.execute("UPDATE kn SET b = id")
        cur.execute("ALTER TABLE kn MODIFY b INT NOT NULL")
        shape = server.table_shape(conn, env.database, "kn", settings.source(env.source), None)
        assert len(chunk_bounds(conn, shape, 10)) == 11  # NOT NULL: cut into key ranges


def test_the_python_read_lands_a_table_the_jvm_read_does_not_take(tap_env, spark) -> None:
    """A composite key with a text column and a TIME column: the chunks are read by Python
    tasks (bulk_read.py, the tap's own encoding), cut by the composite key; every row lands
    once and the lake equals the table."""
    from python_ingest.steps.bootstrap import direct_bootstrap

    env = tap_env
    make_project(env.tmp)
    env.sql("CREATE TABLE spots (region VARCHAR(8) NOT NULL, id INT NOT NULL, at TIME(3), "
            "note TEXT, PRIMARY KEY (region, id))",
            "INSERT INTO spots SELECT ELT(1 + seq % 3, 'north', 'south', 'é-east'), seq, "
            "SEC_TO_TIME(seq * 37.125 - 3000), IF(seq % 5 = 0, NULL, CONCAT('n', seq)) "
            "FROM seq_1_to_240")
    scaffold(env)
    settings = env.settings()
    lines: list[str] = []
    result = direct_bootstrap(spark, settings, settings.source(env.source),
                              f"{env.database}.spots", progress=lines.append, **CHUNK)
    assert any("chunks read by Python tasks" in line for line in lines), lines
    assert result.chunks >= 5 and result.rows == 240
    job = job_of(env, "spots")
    landed = spark.sql(f"select count(*), count(distinct _row_key) from raw.{job}").collect()[0]
    assert tuple(landed) == (240, 240)
    assert assert_lake_equals_source(spark, env, "spots") == 240
