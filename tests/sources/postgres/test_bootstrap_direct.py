"""The direct bootstrap of a PostgreSQL table (issue #62, sources/postgres/direct.py): key
ranges read by Spark tasks under an exported snapshot, straight into the job's lake, then
handed over to the tap; the lake ends equal to the table value for value
(tests/sources/binlog/lake.py), on Hudi and Iceberg, under a workload and under kills."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from python_ingest.exceptions import SluiceError
from tests.conftest import sluice_cmd
from tests.sources.binlog.lake import (
    assert_lake_equals_source,
    job_of,
    make_project,
    run_pipeline,
    scaffold,
)
from tests.sources.postgres.test_snapshot import _prefill
from tests.sources.postgres.workload import PgWorkload
from tests.steps.helpers import assert_index_agrees

pytestmark = [pytest.mark.bootstrap, pytest.mark.postgres_source]
ROWS = 600


@pytest.fixture(autouse=True)
def _fresh_jobs(spark: Any, request: pytest.FixtureRequest) -> Iterator[None]:
    """The jobs' tables dropped before and after each test: every test's tables are
    ``public.*``, so their jobs' names (and tables) are the same in every test of the
    session's warehouse (tests/sources/postgres/test_to_lake.py's too)."""
    def drop() -> None:
        from python_ingest.runtime.catalog import drop_scratch
        from python_ingest.tables.formats import table_exists
        from python_ingest.tables.names import JobModels, JobTables

        for session in sessions:
            for job in ("public_notes", "public_orders", "public_loose"):
                for table in JobTables(job, JobModels(f"stg_{job}", job)).all():
                    if table and table_exists(session, table):
                        drop_scratch(session, table)

    sessions = [spark]
    if "format_spark" in request.fixturenames:
        sessions.append(request.getfixturevalue("format_spark"))
    drop()
    yield
    drop()


def _direct(env: Any, spark: Any, table: str = "notes", **options: Any) -> Any:
    from python_ingest.steps.bootstrap import direct_bootstrap

    settings = env.settings()
    lines: list[str] = []
    result = direct_bootstrap(spark, settings, settings.source(env.source), f"public.{table}",
                              progress=lines.append, chunk_rows_=options.get("chunk_rows", 90),
                              wave=options.get("wave", 3))
    assert any("rows/s" in line and "chunks" in line for line in lines), lines
    assert any("chunks read by Python tasks" in line for line in lines), lines
    return result


def _filled(env: Any) -> None:
    make_project(env.tmp)
    _prefill(env, ROWS)
    scaffold(env)


def _tables(env: Any) -> Any:
    from python_ingest.tables.names import JobModels, JobTables

    job = job_of(env, "notes")
    return JobTables(job, JobModels(f"stg_{job}", job))


def _index_agrees(spark: Any, env: Any) -> None:
    assert_index_agrees(spark, _tables(env))


def _landed_once(spark: Any, env: Any) -> int:
    """The raw table's rows (only the bootstrap's so far), each key once."""
    from python_ingest.tables.formats import name_tables

    tables = _tables(env)
    name_tables(spark, tables.all())  # written by another process
    landed = spark.sql(f"select count(*), count(distinct _row_key) "
                       f"from {tables.raw}").collect()[0]
    assert landed[0] == landed[1], tuple(landed)
    return int(landed[0])


def test_pg_direct_bootstrap_under_concurrent_writes_ends_equal(pg_env, format_spark,
                                                                table_format) -> None:
    """The tap ran first (its slot exists: the snapshot comes from a temporary slot); a
    workload writes during the whole bootstrap; the stream after it; both formats."""
    env, spark = pg_env, format_spark
    env.table_format = table_format
    env.write_config()
    _filled(env)
    env.tap_until_end()  # the tap's slot and checkpoint, before the bootstrap
    stop = threading.Event()
    workload = PgWorkload(env.connect, seed=71, first_id=50_000)

    def write() -> None:
        while not stop.is_set():
            workload.step()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        result = _direct(env, spark)
    finally:
        stop.set()
        writer.join()
    assert result.chunks >= 5 and result.rows >= ROWS - 50, result
    assert _landed_once(spark, env) == result.rows
    workload.run(20)
    workload.close()
    env.tap_until_end()
    run_pipeline(spark, env)
    assert assert_lake_equals_source(spark, env, "notes", json_columns=("attrs",)) >= ROWS - 50
    if table_format == "hudi":
        _index_agrees(spark, env)


def test_pg_killed_direct_bootstrap_resumes_by_chunk(pg_env, spark) -> None:
    """The real CLI SIGKILLed after its first wave's raw commit (the tap's slot new: created
    by the bootstrap), changes made, then killed after the index's commit; the third run
    reads the chunks left under a newer snapshot and finishes: every key landed once. The
    stream's first run after it is killed mid-batch too; after the next, the lake equals the
    table."""
    env = pg_env
    _filled(env)
    args = ("bootstrap", env.source, "public.notes", "--direct", "--chunk-rows", "90",
            "--wave", "2")
    workload = PgWorkload(env.connect, seed=72, first_id=60_000)
    try:
        for fault in ("bootstrap_after_wave", "bootstrap_after_index"):
            killed = sluice_cmd(env.config, *args, env={"SLUICE_FAULT": fault})
            assert killed.returncode == -9, killed.stdout + killed.stderr
            workload.run(30)
        done = sluice_cmd(env.config, *args)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "resuming" in done.stdout and "straight into" in done.stdout, done.stdout
        assert "chunks read by Python tasks" in done.stdout, done.stdout
        assert _landed_once(spark, env) >= ROWS - 60
        workload.run(20)
    finally:
        workload.close()
    env.tap_until_end()
    # the first run after it killed mid-batch (the raw and index tables committed, the lake
    # not), then run again here
    killed = sluice_cmd(env.config, "run", job_of(env, "notes"),
                        env={"SLUICE_FAULT": "merge_after_index"})
    assert killed.returncode == -9, killed.stdout + killed.stderr
    run_pipeline(spark, env)
    assert assert_lake_equals_source(spark, env, "notes", json_columns=("attrs",)) >= ROWS - 60
    _index_agrees(spark, env)


def test_pg_direct_bootstrap_refuses_a_table_without_a_key(pg_env, spark) -> None:
    env = pg_env
    make_project(env.tmp)
    env.sql("CREATE TABLE loose (a int, b text)", "ALTER TABLE loose REPLICA IDENTITY FULL",
            "INSERT INTO loose VALUES (1, 'x'), (1, 'x')")
    scaffold(env)
    with pytest.raises(SluiceError, match="no primary or unique key"):
        _direct(env, spark, "loose")


def test_pg_direct_bootstrap_refuses_while_the_tap_runs(pg_env, spark) -> None:
    """The tap holds its checkpoint store's lock: the bootstrap says to stop it, before any
    slot, topic or table is made."""
    from python_ingest.sources.postgres.position import PgCheckpointStore

    env = pg_env
    _filled(env)
    settings = env.settings()
    store = PgCheckpointStore(settings.path(settings.state_dir), env.source)
    assert store.try_lock()
    try:
        with pytest.raises(SluiceError, match="is running .*stop it during the bootstrap"):
            _direct(env, spark)
    finally:
        store.release()
    assert env.sql("SELECT count(*) FROM pg_replication_slots WHERE database = %s",
                   params=(env.database,))[0][0] == 0
