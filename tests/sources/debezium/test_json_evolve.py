"""Issue #58.5: a JSON Debezium job follows a column added or widened at the source by itself.

Debezium's MariaDB connector on Kafka Connect (JsonConverter, ``schemas.enable=true``, as
test_connect.py runs it) snapshots three tables; ``sluice debezium scaffold`` writes their
jobs from those first events; then, while the connector streams, the tables change:

- ``grow``, whose lake already holds the snapshot, gains a column (``tip``), widens a
  decimal (``price`` DECIMAL(8,2) to (12,2)) and a DATETIME(3) to DATETIME(6) (Debezium's
  ``Timestamp`` in ms becomes ``MicroTimestamp``), with rows changed before, between and after
  the two ALTERs: the next run, without the scaffold run again, lands a lake equal to the
  MariaDB table, the new column and the wider types included (its batch mixes events of three
  schemas);
- ``scaled`` changes a decimal's scale, ``narrowed`` narrows one: each job stops loudly,
  naming the column and why, nothing committed.
"""

from __future__ import annotations

import json
import random
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from python_ingest.exceptions import ReadError
from tests.sources.binlog.conftest import mariadb  # noqa: F401  # the private server fixture
from tests.sources.binlog.lake import make_project
from tests.sources.debezium.test_connect import wait_for

pytestmark = [pytest.mark.debezium, pytest.mark.reliability]
TABLES = {
    "grow": "CREATE TABLE {db}.grow (id INT PRIMARY KEY, name VARCHAR(20), "
            "price DECIMAL(8,2), at DATETIME(3))",
    "scaled": "CREATE TABLE {db}.scaled (id INT PRIMARY KEY, amount DECIMAL(10,2))",
    "narrowed": "CREATE TABLE {db}.narrowed (id INT PRIMARY KEY, amount DECIMAL(12,2))",
}
STREAM = [
    "UPDATE grow SET name = 'before', price = 1.25 WHERE id = 1",
    "ALTER TABLE grow ADD tip DECIMAL(10,2)",
    "UPDATE grow SET tip = 0.75 WHERE id = 2",
    "INSERT INTO grow VALUES (100, 'with tip', 99.99, '2024-05-06 07:08:09.123', 12.50)",
    "ALTER TABLE grow MODIFY price DECIMAL(12,2), MODIFY at DATETIME(6)",
    "INSERT INTO grow VALUES (101, 'big', 1234567890.12, '2024-05-06 07:08:09.5', NULL)",
    "UPDATE grow SET price = 9876543210.98 WHERE id = 3",
    "INSERT INTO grow VALUES (102, 'micro', 3.00, '2024-05-06 07:08:09.123456', -1.00)",
    "UPDATE grow SET at = '1999-12-31 23:59:59.999999', tip = 5.55 WHERE id = 4",
    "DELETE FROM grow WHERE id = 5",
    "UPDATE grow SET name = 'after' WHERE id = 6",
    "ALTER TABLE scaled MODIFY amount DECIMAL(10,3)",
    "INSERT INTO scaled VALUES (10, 1.125)",
    "ALTER TABLE narrowed MODIFY amount DECIMAL(8,2)",
    "INSERT INTO narrowed VALUES (10, 2.50)",
    "INSERT INTO grow VALUES (999, 'marker', 0, NOW(6), 0)",
]


@pytest.fixture(scope="module")
def evolved(spark: Any, broker: str, mariadb: Any,  # noqa: F811
            tmp_path_factory: pytest.TempPathFactory, workdir: Path) -> dict[str, Any]:
    """The three tables captured, scaffolded before they change, changed, and their jobs run
    once (keep going: two of them are to fail)."""
    from python_ingest.config import load_settings
    from python_ingest.runtime import connect
    from python_ingest.scaffold.debezium import scaffold
    from python_ingest.steps.pipeline import run_all
    from tests.conftest import write_config

    tmp_path = tmp_path_factory.mktemp("json_evolve")
    database = f"evo{int(time.time() * 1000) % 10**8}"
    with mariadb.root() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {database}")
        for ddl in TABLES.values():
            cur.execute(ddl.format(db=database))
        cur.executemany(f"INSERT INTO {database}.grow VALUES (%s, %s, %s, %s)",
                        [(i, f"s{i}", Decimal(i) / 4, f"2020-01-0{1 + i % 9} 10:11:12.{i:03d}")
                         for i in range(1, 21)])
        for table in ("scaled", "narrowed"):
            cur.executemany(f"INSERT INTO {database}.{table} VALUES (%s, %s)",
                            [(i, Decimal(i) / 8) for i in range(1, 6)])
        cur.execute("CREATE USER IF NOT EXISTS 'dbz'@'127.0.0.1' IDENTIFIED BY 'dbz-secret'")
        cur.execute("GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, BINLOG MONITOR, "
                    "LOCK TABLES ON *.* TO 'dbz'@'127.0.0.1'")
    prefix = f"{database}json"
    topics = {t: f"{prefix}.{database}.{t}" for t in TABLES}
    connector = {
        "name": prefix, "tasks.max": 1,
        "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
        "database.hostname": "127.0.0.1", "database.port": mariadb.port,
        "database.user": "dbz", "database.password": "dbz-secret",
        "database.server.id": 6400 + random.randrange(1000), "topic.prefix": prefix,
        "database.include.list": database, "snapshot.mode": "initial",
        "schema.history.internal": "io.debezium.storage.file.history.FileSchemaHistory",
        "schema.history.internal.file.filename": str(tmp_path / "history.dat")}
    worker = connect.start_standalone(tmp_path / "connect", broker, [connector])
    try:
        wait_for(broker, topics["grow"], b'"name":"s20"')
        for table in ("scaled", "narrowed"):
            wait_for(broker, topics[table], b'"id":5,')
        make_project(tmp_path)
        config = write_config(tmp_path / "sluice.yml", workdir, broker, {})
        # the jobs and their .avsc from the first events, before any table changes
        jobs = {t: scaffold(load_settings(config, env={}), [topic], tmp_path, config,
                            value_format="json", say=None).jobs_added[0]
                for t, topic in topics.items()}
        # the grow job lands the snapshot: its lake tables exist with the first schema
        first = run_all(spark, load_settings(config, env={}), [jobs["grow"]])
        with mariadb.root(database) as conn, conn.cursor() as cur:
            for statement in STREAM:
                cur.execute(statement)
        wait_for(broker, topics["grow"], b'"name":"marker"')
        wait_for(broker, topics["narrowed"], b'"id":10,')
        wait_for(broker, topics["scaled"], b'"id":10,')
    finally:
        worker.stop()
    settings = load_settings(config, env={})
    results = run_all(spark, settings, list(jobs.values()), keep_going=True, max_parallel=1)
    with mariadb.root(database) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, name, price, at, tip FROM grow")
        source = {r[0]: tuple(r[1:]) for r in cur.fetchall()}
    return {"jobs": jobs, "results": dict(zip(TABLES, results, strict=True)),
            "table": source, "settings": settings, "first": first[0]}


@pytest.mark.e2e
def test_an_added_and_widened_column_lands_in_the_same_run(evolved: dict[str, Any],
                                                           spark: Any) -> None:
    result = evolved["results"]["grow"]
    assert result.outcome != "failed", result.error
    assert result.counts.get("decode_errors", 0) == 0, result.counts
    job = evolved["jobs"]["grow"]
    lake = {r["id"]: (r["name"], r["price"], r["at"].replace(tzinfo=None), r["tip"])
            for r in spark.table(f"lake.{job}").collect()}
    assert len(evolved["table"]) == 23 and lake == evolved["table"]
    for name in (f"raw.{job}", f"lake.{job}"):  # widened and grown in the same run
        types = dict(spark.table(name).dtypes)
        assert (types["price"], types["tip"], types["at"]) == (
            "decimal(12,2)", "decimal(10,2)", "timestamp"), (name, types)
    # the .avsc follows what the events carry: the new column, the wider types, and the
    # former types older events of the column still read with
    settings = evolved["settings"]
    row = json.loads((settings.root / settings.job(job).schema).read_text())
    fields = {f["name"]: f for f in row["fields"]}
    assert list(fields) == ["id", "name", "price", "at", "tip"]
    assert fields["price"]["sluice.older_types"] == ["decimal(8,2)"]
    assert fields["at"]["sluice.older_types"] == ["timestamp-millis"]
    assert evolved["first"].counts["read"] == 20 and result.batch_id == 2


@pytest.mark.e2e
@pytest.mark.parametrize(("table", "why"), [
    ("scaled", r"column amount is decimal\(10,3\) in a Debezium event but decimal\(10,2\) in "
               r"the job's schema \(a decimal scale change"),
    ("narrowed", r"column amount is decimal\(8,2\) in a Debezium event but decimal\(12,2\) in "
                 r"the job's schema \(a narrowing")])
def test_a_change_no_lake_can_follow_stops_the_job_naming_the_column(
        evolved: dict[str, Any], spark: Any, table: str, why: str) -> None:
    import re

    from python_ingest.tables.checkpoints import read_checkpoint

    result = evolved["results"][table]
    assert result.outcome == "failed" and re.search(why, result.error or ""), result.error
    job = evolved["jobs"][table]
    assert read_checkpoint(spark, f"raw.{job}") is None  # nothing committed
    row = json.loads((evolved["settings"].root / evolved["settings"].job(job).schema)
                     .read_text())
    assert [f["name"] for f in row["fields"]] == ["id", "amount"]
    assert "sluice.older_types" not in row["fields"][1]


# Unit level (no Spark): JsonConverter messages shaped as above, through a job's decoder and
# ``follow`` one schema change after another.

def _message(fields: list[tuple[str, str, str | None, dict[str, str]]], after: dict[str, Any],
             pos: int) -> bytes:
    from tests.sources.debezium.test_debezium_reliability import (
        binlog,
        connect_row,
        json_message,
    )

    return json_message(connect_row(fields), "c", after, binlog(pos))


def test_a_decoder_reads_each_message_by_its_own_schema_and_follows_step_by_step(
        make_settings: Any, tmp_path: Path) -> None:
    """Three versions of a row: v2 adds ``tip``, v3 widens ``price`` and turns ``at`` from
    ``Timestamp`` (ms) into ``MicroTimestamp``. Each change stops the decoder with a ReadError
    ``follow`` widens the .avsc with; then every version's message reads right: v1's ``at``
    in milliseconds lands as the same instant in the microsecond column."""
    from python_ingest.sources.debezium.follow import follow
    from python_ingest.sources.debezium.topics import connect_to_avro
    from tests.sources.debezium import events as ev
    from tests.sources.debezium.test_debezium_reliability import connect_row, json_decoder

    def decimal(precision: int, scale: int) -> dict[str, str]:
        return {"scale": str(scale), "connect.decimal.precision": str(precision)}

    v1 = [("id", "int32", None, {}), ("price", "bytes", ev.DECIMAL, decimal(8, 2)),
          ("at", "int64", "io.debezium.time.Timestamp", {})]
    v2 = [*v1, ("tip", "bytes", ev.DECIMAL, decimal(10, 2))]
    v3 = [v2[0], ("price", "bytes", ev.DECIMAL, decimal(12, 2)),
          ("at", "int64", "io.debezium.time.MicroTimestamp", {}), v2[3]]
    price = Decimal("1234567890.12")
    messages = [
        _message(v1, {"id": 1, "price": ev.to_json(Decimal("1.25"), 2), "at": 1_500}, 100),
        _message(v2, {"id": 2, "price": ev.to_json(Decimal("2.50"), 2), "at": 2_000,
                      "tip": ev.to_json(Decimal("0.75"), 2)}, 200),
        _message(v3, {"id": 3, "price": ev.to_json(price, 2), "at": 3_000_001,
                      "tip": None}, 300)]
    decoder = json_decoder(make_settings, tmp_path, connect_to_avro(connect_row(v1)))
    settings = make_settings({"j": {"source": "debezium", "topic": "t", "value_format": "json",
                                    "schema": str(tmp_path / "row.avsc"), "row_key": ["id"]}})
    job = settings.job("j")
    followed: list[list[str]] = []
    for _ in range(3):
        try:
            rows = [decoder.decode(m) for m in messages]
            break
        except ReadError as exc:
            assert " follow=" in str(exc)
            followed.append(follow(settings, job, exc))
            decoder = json_decoder(make_settings, tmp_path,
                                   json.loads((tmp_path / "row.avsc").read_text()))
    assert followed == [["added tip decimal(10,2)"],
                        ["widened price from decimal(8,2) to decimal(12,2)",
                         "widened at from timestamp-millis to timestamp-micros"]]
    assert dict(decoder.schema.payload) == {"id": "bigint", "price": "decimal(12,2)",
                                            "at": "timestamp", "tip": "decimal(10,2)"}
    assert [(r["id"], r["price"], r["tip"]) for r in rows] == [
        (1, Decimal("1.25"), None), (2, Decimal("2.50"), Decimal("0.75")), (3, price, None)]
    assert [r["at"].timestamp() for r in rows] == [1.5, 2.0, 3.000001]
    # a version between two the job followed (another partition's, read later) is older
    v_between = [v2[0], ("price", "bytes", ev.DECIMAL, decimal(10, 2)), v1[2]]
    between = decoder.decode(_message(v_between, {"id": 4, "price": ev.to_json(
        Decimal("12345678.90"), 2), "at": 4_000}, 400))
    assert (between["price"], between["at"].timestamp()) == (Decimal("12345678.90"), 4.0)
    # nothing more to follow: the same error again changes nothing (the run then stops)
    assert follow(settings, job, ReadError(" follow=" + json.dumps(
        connect_to_avro(connect_row(v3))["fields"]))) == []


@pytest.mark.parametrize(("old", "new", "why"), [
    ({"scale": "2", "connect.decimal.precision": "10"},
     {"scale": "3", "connect.decimal.precision": "10"}, "a decimal scale change"),
    ({"scale": "2", "connect.decimal.precision": "12"},
     {"scale": "2", "connect.decimal.precision": "8"}, "a narrowing"),
    ({"scale": "2", "connect.decimal.precision": "10"}, None, "an incompatible type change")])
def test_a_change_no_lake_can_follow_stops_the_decoder_naming_the_column(
        make_settings: Any, tmp_path: Path, old: dict[str, str], new: dict[str, str] | None,
        why: str) -> None:
    from python_ingest.sources.debezium.topics import connect_to_avro
    from tests.sources.debezium import events as ev
    from tests.sources.debezium.test_debezium_reliability import connect_row, json_decoder

    before = [("id", "int32", None, {}), ("amount", "bytes", ev.DECIMAL, old)]
    after = [before[0], ("amount", "bytes", ev.DECIMAL, new) if new else
             ("amount", "string", None, {})]
    decoder = json_decoder(make_settings, tmp_path, connect_to_avro(connect_row(before)))
    value = ev.to_json(Decimal("1.125"), 3) if new else "1.125"
    with pytest.raises(ReadError, match=rf"column amount is .* \({why}") as stop:
        decoder.decode(_message(after, {"id": 1, "amount": value}, 100))
    assert " follow=" not in str(stop.value)
