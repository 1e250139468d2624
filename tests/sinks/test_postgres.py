"""The PostgreSQL sink on a hand-made lake table holding every column type the changelog
produces: the type mapping value by value, then incremental dispersals with updates, deletes
(tombstones) and a re-insert of a deleted key, and the position kept in the target."""

from __future__ import annotations

import datetime as dt
import gc
import json
import logging
import time
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from pyspark.sql import functions as F

from python_ingest.config.dispersal import PostgresTarget
from python_ingest.exceptions import DispersalError
from python_ingest.sinks.changes import lake_position
from python_ingest.sinks.pgserver import LocalPostgres
from python_ingest.sinks.postgres import disperse_postgres
from python_ingest.steps.merge.index import INDEX_COLUMNS
from python_ingest.tables.checkpoints import step_properties
from python_ingest.tables.formats import append, ensure_table
from python_ingest.tables.names import JobModels, JobTables
from tests.sinks.handmade import COLUMNS, TRICKY, WHEN, row, write_batch

pytestmark = [pytest.mark.dispersal, pytest.mark.e2e]

PG_TYPES = {
    "_row_key": "text", "c_int": "integer", "c_bigint": "bigint", "c_float": "real",
    "c_double": "double precision", "c_decimal": "numeric", "c_string": "text",
    "c_binary": "bytea", "c_boolean": "boolean", "c_date": "date",
    "c_timestamp": "timestamp with time zone", "c_array": "jsonb", "c_map": "jsonb",
    "c_struct": "jsonb", "_ref_key": "bigint", "_batch_id": "bigint",
}
def target_rows(pg: LocalPostgres, table: str) -> dict[str, dict[str, Any]]:
    with psycopg.connect(pg.dsn) as conn:
        cur = conn.execute(f"select * from {table}")
        names = [d.name for d in cur.description or []]
        return {r[0]: dict(zip(names, r, strict=True)) for r in cur.fetchall()}


def expected(r: dict[str, Any]) -> dict[str, Any]:
    """What PostgreSQL holds for a lake row: floats as stored, nested values as JSON."""
    out = {k: v for k, v in r.items() if k != "_is_deleted"}
    out["c_float"] = pytest.approx(r["c_float"])
    return out


def test_every_type_and_incremental_changes_reach_postgres(
        format_spark: Any, postgres: LocalPostgres, job_name: str) -> None:
    spark = format_spark
    tables = JobTables(job_name, JobModels(staging=f"stg_{job_name}", lake=job_name))
    assert tables.lake is not None
    ensure_table(spark, tables.lake, COLUMNS)
    ensure_table(spark, tables.index, INDEX_COLUMNS)
    target = PostgresTarget(name="mirror", table=f"lake.{job_name}", dsn=postgres.dsn,
                            chunk_rows=2)
    nulls = {n: None for n, _ in COLUMNS if n not in ("_row_key", "_batch_id", "_is_deleted")}
    lake = {"a": row("a", 1, 1, c_string=TRICKY, c_double=float("nan")),
            "b": row("b", 1, 2, c_double=float("inf")), "c": row("c", 1, 3),
            "n": row("n", 1, 4, **nulls)}
    write_batch(spark, tables, 1, list(lake.values()), [])

    first = disperse_postgres(spark, tables, target, lake_position(spark, tables))
    assert (first.since, first.upserted, first.deleted) == (None, 4, 0)
    with psycopg.connect(postgres.dsn) as conn:
        types = dict(conn.execute(
            "select column_name, data_type from information_schema.columns "
            "where table_schema = 'lake' and table_name = %s", (job_name,)).fetchall())
        key = conn.execute(
            "select a.attname from pg_index i join pg_attribute a on a.attrelid = i.indrelid "
            "and a.attnum = any(i.indkey) where i.indrelid = %s::regclass and i.indisprimary",
            (target.table,)).fetchall()
    assert types == PG_TYPES
    assert key == [("_row_key",)]
    got = target_rows(postgres, target.table)
    a = got["a"]
    assert a["c_string"] == TRICKY and a["c_double"] != a["c_double"]  # NaN
    assert a["c_date"] == dt.date(1, 1, 1) and a["c_timestamp"] == WHEN
    assert a["c_binary"] == bytes([0, 255, 1]) and a["c_decimal"] == Decimal("-12345.678")
    assert a["c_array"] == [1, None, 3] and a["c_map"] == {"k": 1, "none": None}
    assert a["c_struct"] == {"a": 1, "b": None}
    assert got["b"]["c_double"] == float("inf")
    assert got["n"] == {**{k: None for k in PG_TYPES}, "_row_key": "n", "_batch_id": 1}
    assert got["c"] == expected(lake["c"])

    # batch 2: a updated, b deleted, d new; batch 3: b re-inserted, d deleted, c updated
    lake["a"] = row("a", 2, 11)
    lake["d"] = row("d", 2, 12)
    write_batch(spark, tables, 2, [lake["a"], lake["d"]], ["b"])
    del lake["b"]
    second = disperse_postgres(spark, tables, target, lake_position(spark, tables))
    assert (second.since and second.since.batch_id, second.until.batch_id) == (1, 2)
    assert (second.upserted, second.deleted) == (2, 1)
    assert target_rows(postgres, target.table) == \
        {**{k: expected(v) for k, v in lake.items() if k != "n"},
         "n": got["n"]}

    lake["b"] = row("b", 3, 21)
    lake["c"] = row("c", 3, 23, c_string="")
    write_batch(spark, tables, 3, [lake["b"], lake["c"]], ["d"])
    del lake["d"]
    third = disperse_postgres(spark, tables, target, lake_position(spark, tables))
    assert (third.upserted, third.deleted) == (2, 1)
    assert target_rows(postgres, target.table) == \
        {**{k: expected(v) for k, v in lake.items() if k != "n"}, "n": got["n"]}
    again = disperse_postgres(spark, tables, target, lake_position(spark, tables))
    assert again.up_to_date and (again.upserted, again.deleted) == (0, 0)
    with psycopg.connect(postgres.dsn) as conn:
        stored = conn.execute("select lake_table, lake_commit, batch_id from sluice_dispersal "
                              "where job = %s and target = 'mirror'", (job_name,)).fetchone()
    assert stored == (tables.lake, third.until.commit, 3)  # (up to date: nothing written)
    assert json.loads(json.dumps(third.as_details()))["to"] == 3

    # two batches in one dispersal: c deleted in 4 and re-inserted in 5 is an upsert; e
    # written in 4 and deleted in 5 never reaches the target
    write_batch(spark, tables, 4, [row("e", 4, 41)], ["c"])
    lake["c"] = row("c", 5, 51)
    write_batch(spark, tables, 5, [lake["c"]], ["e"])
    fifth = disperse_postgres(spark, tables, target, lake_position(spark, tables))
    assert (fifth.since and fifth.since.batch_id, fifth.until.batch_id) == (3, 5)
    assert (fifth.upserted, fifth.deleted) == (1, 0)  # c; e is not there to delete
    assert target_rows(postgres, target.table) == \
        {**{k: expected(v) for k, v in lake.items() if k != "n"}, "n": got["n"]}

    # a table of other types than the lake's: refused with what to do, no position stored
    bad = PostgresTarget(name="strict", table=f"lake.{job_name}_bad", dsn=postgres.dsn)
    with psycopg.connect(postgres.dsn) as conn:
        conn.execute(f"create table {bad.table} (_row_key text primary key, c_date boolean)")
    with pytest.raises(DispersalError, match=r"(?s)refused the dispersal.*position did not move"):
        disperse_postgres(spark, tables, bad, lake_position(spark, tables))
    with psycopg.connect(postgres.dsn) as conn:
        assert conn.execute("select count(*) from sluice_dispersal where target = 'strict'"
                            ).fetchone() == (0,)

    # dates and times before year 1 (the tap's zero dates in NOT NULL columns) land as BC
    ancient = spark.sql(
        "select 'z' as _row_key, date_add(date'1970-01-01', -1560009) as c_date, "
        "timestamp_micros(-1560009 * 86400000000 + 3723000001) as c_timestamp, "
        "cast(6 as bigint) as _batch_id")
    ancient = ancient.select(*[ancient[n] if n in ancient.columns else F.lit(None).cast(t)
                               .alias(n) for n, t in COLUMNS])
    append(ancient, tables.lake, step_properties("merge", 6))
    disperse_postgres(spark, tables, target, lake_position(spark, tables))
    with psycopg.connect(postgres.dsn) as conn:
        assert conn.execute(f"select c_date::text, (c_timestamp at time zone 'UTC')::text "
                            f"from {target.table} where _row_key = 'z'").fetchone() == \
            ("2303-11-03 BC", "2303-11-03 01:02:03.000001 BC")


def _py4j_garbage(spark: Any) -> None:
    """Java objects dropped at once, and the wait until py4j's finalizer thread has sent their
    garbage-collection commands (on its own connection to the JVM)."""
    for n in range(20):
        spark._jvm.java.lang.StringBuilder(str(n))
    gc.collect()
    pending = spark.sparkContext._gateway._gateway_client.finalizer_deque
    deadline = time.monotonic() + 30
    while pending and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.5)  # the last command taken from the queue is sent


@pytest.mark.reliability
def test_a_private_postgres_started_beside_spark_leaves_py4j_alone(
        spark: Any, caplog: pytest.LogCaptureFixture) -> None:
    """#34: the server started by a fork that ran Python (a ``preexec_fn``) freed py4j's
    finalizer connection in the child, shutting its socket down for this process too; the
    next garbage collection printed "Connection reset by peer" tracebacks (``sluice demo``'s
    dispersal did, though it succeeded)."""
    _py4j_garbage(spark)  # the finalizer thread holds a connection
    caplog.set_level(logging.INFO)
    server = LocalPostgres().start()
    try:
        _py4j_garbage(spark)
        with psycopg.connect(server.dsn) as conn:
            assert conn.execute("select current_user").fetchone() == ("sluice",)
    finally:
        server.stop()
    failed = [r for r in caplog.records if r.exc_info or "Exception while sending" in r.message]
    assert not failed, caplog.text


def test_a_private_postgres_stops_cleanly_with_a_client_session_still_open() -> None:
    """#38: a test that leaves a connection open must not hold the server's stop: the fast
    shutdown ends the session and exits cleanly (the smart one waited for the session until it
    was killed, 30 s later, at the end of every test run that used the server)."""
    server = LocalPostgres().start()
    left_open = psycopg.connect(server.dsn)
    try:
        assert left_open.execute("select 1").fetchone() == (1,)
        assert server.stop(timeout_s=20) == 0  # a clean exit, not killed after the timeout
        with pytest.raises(psycopg.OperationalError):
            left_open.execute("select 1")
    finally:
        left_open.close()
        server.stop()
