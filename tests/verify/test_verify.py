"""`sluice verify` against a private MariaDB and the real pipeline (tap, Kafka, Spark, dbt)."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from python_ingest.runtime.session import activate
from python_ingest.tables.runs import last_runs
from python_ingest.verify.run import verify
from tests.sources.binlog.lake import job_of, make_project, run_pipeline, scaffold
from tests.sources.binlog.workload import Workload

pytestmark = pytest.mark.e2e

KINDS = """CREATE TABLE kinds (
  id INT PRIMARY KEY, big BIGINT, ubig BIGINT UNSIGNED, dec_col DECIMAL(20,6), dbl DOUBLE,
  flt FLOAT, day DATE, stamp DATETIME(6), dur TIME(3), txt VARCHAR(40), choice ENUM('a','b','ç'),
  flags SET('x','y','z'), raw VARBINARY(16), doc LONGTEXT, bits BIT(8), yr YEAR, flag BIT(1),
  due DATE NOT NULL, place POINT)"""
NEW_VALUES = {  # one changed value per column type, written behind the pipeline's back
    "big": "-9007199254740993", "ubig": "18446744073709551615", "dec_col": "12345678.000001",
    "dbl": "2.5e-3", "flt": "1.5", "day": "'1999-12-31'", "stamp": "'2001-02-03 04:05:06.000007'",
    "dur": "'-838:59:58.999'", "txt": "'zürich ✓'", "choice": "'ç'", "flags": "'x,z'",
    "raw": "x'00ff00'", "doc": "'{\"k\": [1, 2]}'", "bits": "b'10000001'", "yr": "2155",
    "flag": "b'0'", "due": "'0000-00-00'", "place": "ST_GeomFromText('POINT(-1.5 2)')"}


def _due(i: int) -> str:
    return "0000-00-00" if i % 5 == 0 else f"2022-02-{1 + i % 27:02d}"  # zero dates, NOT NULL


def _fill(env: Any, rows: int) -> None:
    values = ", ".join(
        f"({i}, {i * 1000003}, {i * 7}, {i}.25, {i / 3}, {i / 8}, '2020-01-{1 + i % 28:02d}', "
        f"'2021-03-04 05:06:{i % 60:02d}.{i:06d}', '{i}:01:02.5', 'row {i} ø', "
        f"'{'ab'[i % 2]}', '{'x,y' if i % 3 else ''}', x'{i:04x}', '{{\"n\": {i}}}', {i % 256}, "
        f"{1990 + i % 30}, {i % 2}, '{_due(i)}', "
        f"ST_GeomFromText('POINT({i} {i / 4})'))" for i in range(1, rows + 1))
    env.sql(f"INSERT INTO kinds VALUES {values}")


def _lake(env: Any) -> tuple[Any, str]:
    settings = env.settings()
    job = settings.job(job_of(env, "kinds"))
    return job, f"lake.{job.name}"


def test_equal_then_each_change_behind_the_pipelines_back_is_found_by_key_and_column(
        tap_env: Any, spark: Any, capsys: pytest.CaptureFixture[str]) -> None:
    env = tap_env
    make_project(env.tmp)
    env.sql("SET GLOBAL sql_mode = 'STRICT_TRANS_TABLES'", KINDS)  # zero dates allowed
    scaffold(env)
    env.tap_until_end()  # the tap's starting position: the rows below are in its binlog
    _fill(env, 40)
    env.tap_until_end()
    run_pipeline(spark, env)
    job, lake = _lake(env)

    equal = verify(spark, env.settings(), job, lake, range_rows=4, fanout=4, settle_s=30, quiet_s=3)
    assert equal.equal and (equal.source_rows, equal.lake_rows) == (40, 40)
    assert equal.rows_moved == 0  # equal tables: no row crosses the wire

    # behind the pipeline's back: not in the binlog, so the lake never sees it
    changed_rows = env.change_rows(
        "kinds", 10, NEW_VALUES, "SET SESSION sql_log_bin = 0",
        "SET SESSION sql_mode = 'STRICT_TRANS_TABLES'", "DELETE FROM kinds WHERE id = 3",
        "INSERT INTO kinds (id, txt, due) VALUES (999, 'only in the source', '2000-01-01')")

    found = verify(spark, env.settings(), job, lake, range_rows=4, fanout=4, settle_s=30, quiet_s=3)
    assert not found.equal
    kinds = {d.key: (d.kind, d.columns) for d in found.differences}
    assert kinds.pop("3") == ("extra", [])
    assert kinds.pop("999") == ("missing", [])
    assert kinds == {row: ("differs", columns) for row, columns in changed_rows.items()}
    assert found.ranges_differing > 0 and found.rows_moved < 2 * 40  # only differing ranges
    assert found.source_position and found.source_position.startswith("binlog.")

    # the command line (in this process: its own JVM would add nothing the command does):
    # exit code 1, the same keys in --json, the result in meta.runs
    from python_ingest.cli.main import main

    capsys.readouterr()
    code = main(["--config", str(env.config), "verify", job.name, "--json", "--range-rows", "4",
                 "--quiet-s", "1", "--settle-s", "10"])
    out = capsys.readouterr()
    assert code == 1, out.err
    (reported,) = json.loads(out.out)
    assert not reported["equal"] and reported["source_rows"] == 40
    assert {d["key"]: d["kind"] for d in reported["differences"]}["999"] == "missing"
    runs = last_runs(spark, job.name, 3)
    assert runs[0]["outcome"] == "verified-different"
    assert runs[0]["counts"]["verify_differences"] == len(found.differences)


def test_equal_tables_verify_equal_while_the_source_is_being_written_to(
        tap_env: Any, spark: Any) -> None:
    """The tap and the pipeline keep running: lag is re-checked, never reported."""
    env = tap_env
    make_project(env.tmp)
    env.write_config(exclude=[f"{env.database}.order_lines"])
    with env.server.root(env.database) as conn:
        Workload.create(conn)
    scaffold(env)
    env.tap_until_end()
    with env.server.root(env.database) as conn:
        Workload(conn, seed=51).run(60)
    env.tap_until_end()
    run_pipeline(spark, env)
    job = env.settings().job(job_of(env, "orders"))
    tap = env.start_tap()
    stop = threading.Event()
    errors: list[BaseException] = []

    def keep(work: Any) -> None:
        try:
            while not stop.is_set():
                work()
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    def write() -> None:
        with env.server.root(env.database) as conn:
            Workload(conn, seed=52).run(3, pause_s=0.2)

    def pipeline() -> None:
        activate(spark)  # this thread shares the test's SparkSession
        run_pipeline(spark, env)

    threads = [threading.Thread(target=keep, args=(write,)),
               threading.Thread(target=keep, args=(pipeline,))]
    for thread in threads:
        thread.start()
    try:
        result = verify(spark, env.settings(), job, f"lake.{job.name}", settle_s=300,
                        quiet_s=90)  # a pipeline cycle here takes up to about a minute
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=300)
        env.stop_tap(tap)
    assert not errors, errors
    assert result.equal, result.differences
    assert result.source_rows > 0 and result.source_position
