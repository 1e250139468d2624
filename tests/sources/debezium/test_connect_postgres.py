"""Debezium's PostgreSQL connector itself (issue #58.1, .6, .8): Kafka Connect (Apache Kafka's
standalone worker, as test_connect.py runs it) with Debezium's PostgresConnector (pgoutput)
reading a database of the session's private PostgreSQL, JSON with schemas; sluice scaffolds
both topics and runs the pipeline; each lake equals the PostgreSQL table.

What PostgreSQL does here is what the ordering and the TOAST handling depend on
(tests/sources/debezium/pg_cases.py): a transaction in flight when the snapshot is read and
committed after it; a long transaction updating one row twice with more than 1 MiB of WAL
between the updates while another commits, more than 64 MiB of WAL later (both updates then
lie far before the commit Debezium streamed before theirs), another row twice within those
64 MiB, a third before them and again after that commit; updates leaving TOASTed columns
unchanged; a numeric(3,5) column; an incremental snapshot (a signal) of a third table,
ledger, while that transaction, which changed ledger's row 1 first, is open, and after it a
blocking snapshot of ledger between two changes of its row 2. One worker, one
connector, one pipeline run for the module (ledger's job is run by its own test).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.sources.binlog.lake import make_project
from tests.sources.debezium import pg_cases
from tests.sources.debezium.test_connect import topic_messages, wait_for

pytestmark = [pytest.mark.debezium, pytest.mark.e2e]
BIG = 6000  # characters / bytes: out of line (STORAGE EXTERNAL), a TOASTed value
SETUP = [
    "CREATE TABLE orders (id int PRIMARY KEY, v text)",
    "CREATE TABLE notes (id int PRIMARY KEY, body text, raw bytea, n int, tiny numeric(3,5))",
    "ALTER TABLE notes ALTER body SET STORAGE EXTERNAL, ALTER raw SET STORAGE EXTERNAL",
    "CREATE TABLE filler (id serial PRIMARY KEY, pad text)",  # WAL only: not captured
    "CREATE TABLE ledger (id int PRIMARY KEY, v text)",  # read by an incremental snapshot
    "INSERT INTO ledger VALUES (1, 'start'), (2, 'start')",
    "CREATE TABLE debezium_signal (id varchar(64) PRIMARY KEY, type varchar(32) NOT NULL, "
    "data varchar(2048))",
    "INSERT INTO orders VALUES (1, 'start'), (3, 'start'), (4, 'start'), (5, 'start'), "
    "(6, 'start')",
    f"INSERT INTO notes VALUES (1, repeat('a', {BIG}), decode(repeat('00ff', {BIG // 2}), "
    "'hex'), 1, 0.00125), (2, repeat('b', 5000), NULL, 1, NULL), (3, 'short', '\\x01', 1, -0.009)",
]
STREAM = [  # once the snapshot is in the topics
    "UPDATE notes SET n = 2 WHERE id = 1",  # body and raw unchanged: placeholders
    "UPDATE notes SET raw = '\\x02', n = 3 WHERE id = 2",  # body unchanged
    "UPDATE notes SET body = 'now short', tiny = 0.00999 WHERE id = 3",
    "DELETE FROM orders WHERE id = 3",
]
FILL = ("INSERT INTO filler (pad) SELECT md5(g::text) || repeat('x', 200) "
        "FROM generate_series(1, {n}) AS g")


@dataclass(frozen=True)
class Captured:
    database: str
    messages: dict[str, list[bytes]]  # table -> the JSON values Debezium wrote
    tables: dict[str, Any]  # table -> rows PostgreSQL held at the end (pg_cases.plain)
    wal_between: int  # bytes of WAL between the long transaction's two updates
    far_behind: int  # bytes of WAL between its first update and the commit streamed before it
    jobs: dict[str, str]
    counts: dict[str, int]
    config: Path
    ledger: list[bytes]  # the ledger topic's values: its initial and incremental snapshots


def _wait_count(broker: str, topic: str, needle: bytes, count: int) -> None:
    """Until ``count`` messages of ``topic`` hold ``needle``."""
    deadline = time.monotonic() + 120
    while sum(1 for _, v in topic_messages(broker, topic) if v and needle in v) < count:
        assert time.monotonic() < deadline, f"Debezium did not deliver {needle!r} {count} times"
        time.sleep(0.5)


def _wal(cur: Any) -> int:
    cur.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn")
    return int(cur.fetchone()[0])


@pytest.fixture(scope="module")
def captured(spark: Any, broker: str, postgres: Any, workdir: Path,
             tmp_path_factory: pytest.TempPathFactory) -> Captured:
    """One Connect worker, one PostgreSQL connector; the statements above; one pipeline run."""
    import psycopg2

    from python_ingest.config import load_settings
    from python_ingest.runtime import connect
    from python_ingest.scaffold.debezium import scaffold
    from python_ingest.steps.pipeline import run_all
    from tests.conftest import write_config
    from tests.sources.postgres.support import admin

    tmp_path = tmp_path_factory.mktemp("connect_pg")
    database = f"dbzpg{int(time.time() * 1000) % 10**8}"
    slot, prefix = f"{database}_slot", database
    with admin(postgres) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {database}")
    with admin(postgres, database) as conn, conn.cursor() as cur:
        for statement in SETUP:
            cur.execute(statement)
        cur.execute(f"CREATE PUBLICATION {database}_pub FOR TABLE orders, notes, ledger, "
                    "debezium_signal")
        # the slot exists before the snapshot is read, as when it was made beforehand: a
        # transaction in flight at the snapshot is streamed after the snapshot's rows
        cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    in_flight = psycopg2.connect(host="127.0.0.1", port=postgres.port, user="sluice",
                                 dbname=database)
    long_tx = psycopg2.connect(host="127.0.0.1", port=postgres.port, user="sluice",
                               dbname=database)
    worker = None
    try:
        with in_flight.cursor() as cur:
            cur.execute("UPDATE orders SET v = 'in flight at the snapshot' WHERE id = 4")
        worker = connect.start_standalone(tmp_path / "connect", broker, [{
            "name": prefix, "tasks.max": 1,
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "plugin.name": "pgoutput", "database.hostname": "127.0.0.1",
            "database.port": postgres.port, "database.user": "sluice",
            "database.password": "unused", "database.dbname": database,
            "topic.prefix": prefix,
            "table.include.list": "public.orders,public.notes,public.ledger,"
                                  "public.debezium_signal",
            "signal.data.collection": "public.debezium_signal",
            "slot.name": slot, "publication.name": f"{database}_pub",
            "publication.autocreate.mode": "disabled", "snapshot.mode": "initial"}])
        topics = {t: f"{prefix}.public.{t}" for t in pg_cases.TABLES}
        ledger_topic = f"{prefix}.public.ledger"
        wait_for(broker, topics["orders"], b'"start"')
        with in_flight.cursor() as cur:
            cur.execute("UPDATE orders SET v = 'committed after the snapshot' WHERE id = 1")
        in_flight.commit()
        with admin(postgres, database) as conn, conn.cursor() as cur:
            for statement in STREAM:
                cur.execute(statement)
            with long_tx.cursor() as tx:
                tx.execute("UPDATE ledger SET v = 'far, open at the read' WHERE id = 1")
                tx.execute("UPDATE orders SET v = 'first of two' WHERE id = 1")
                start = _wal(cur)
                tx.execute(FILL.format(n=6000))  # about 1.9 MiB of WAL
                tx.execute("UPDATE orders SET v = 'second of two' WHERE id = 1")
                wal_between = _wal(cur) - start
                tx.execute("UPDATE orders SET v = 'far before the commit' WHERE id = 5")
                tx.execute(FILL.format(n=220_000))  # about 70 MiB: past the commit order's 64
                # an incremental snapshot of ledger while the transaction is open: its read of
                # row 1 holds 'start' and is streamed before the transaction's change of it
                cur.execute("INSERT INTO debezium_signal VALUES ('snap-ledger', "
                            "'execute-snapshot', '{\"data-collections\": [\"public.ledger\"], "
                            "\"type\": \"incremental\"}')")
                wait_for(broker, ledger_topic, b'"incremental"')
                tx.execute("UPDATE orders SET v = 'first near' WHERE id = 6")
                tx.execute(FILL.format(n=6000))
                tx.execute("UPDATE orders SET v = 'second near' WHERE id = 6")
                tx.execute(FILL.format(n=2000))  # both within 64 MiB, over 256 KiB before
                cur.execute("INSERT INTO orders VALUES (2, 'committed meanwhile')")
                far_behind = _wal(cur) - start
                tx.execute("UPDATE orders SET v = 'after the commit meanwhile' WHERE id = 5")
                tx.execute(FILL.format(n=200))
            long_tx.commit()
            cur.execute("INSERT INTO orders VALUES (99, 'marker')")
            tables = {}
            for table, columns in pg_cases.TABLES.items():
                cur.execute(f"SELECT {', '.join(columns)} FROM {table}")
                tables[table] = pg_cases.table_rows(list(cur.fetchall()), columns)
        wait_for(broker, topics["orders"], b'"marker"')
        messages = {t: [v for _, v in topic_messages(broker, topic) if v]
                    for t, topic in topics.items()}
        wait_for(broker, ledger_topic, b'"far, open at the read"')
        with admin(postgres, database) as conn, conn.cursor() as cur:
            # a blocking snapshot of ledger between two changes of its row 2
            cur.execute("UPDATE ledger SET v = 'before blocking' WHERE id = 2")
            signal = json.dumps({"data-collections": ["public.ledger"], "type": "blocking"})
            cur.execute("INSERT INTO debezium_signal VALUES ('snap-blocking', "
                        "'execute-snapshot', %s)", (signal,))
            _wait_count(broker, ledger_topic, b'"before blocking"', 2)  # the change, the read
            cur.execute("UPDATE ledger SET v = 'after blocking' WHERE id = 2")
        wait_for(broker, ledger_topic, b'"after blocking"')
        ledger = [v for _, v in topic_messages(broker, ledger_topic) if v]
    finally:
        in_flight.close()
        long_tx.close()
        if worker is not None:
            worker.stop()
        with admin(postgres) as conn, conn.cursor() as cur:
            cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                        "WHERE slot_name = %s AND NOT active", (slot,))
    if os.environ.get("SLUICE_SAVE_DEBEZIUM_CASES"):
        pg_cases.save({**messages, "ledger": ledger}, tables, {
            "wal_between_updates": wal_between,
            "wal_from_first_update_to_commit": far_behind})

    make_project(tmp_path)
    config = write_config(tmp_path / "sluice.yml", workdir, broker, {})
    # a prefix: the session's warehouse may hold a PostgreSQL tap test's public_notes job
    result = scaffold(load_settings(config, env={}), list(topics.values()), tmp_path, config,
                      value_format="json", say=None, job_prefix="dbzpg_")
    jobs = {t: next(j for j in result.jobs_added if t in j) for t in topics}
    runs = run_all(spark, load_settings(config, env={}), list(jobs.values()))
    jobs["ledger"] = scaffold(load_settings(config, env={}), [ledger_topic], tmp_path, config,
                              value_format="json", say=None,
                              job_prefix="dbzpg_").jobs_added[0]
    counts: dict[str, int] = {}
    for run in runs:
        for name, value in dict(run.counts).items():
            counts[name] = counts.get(name, 0) + int(value)
    return Captured(database, messages, tables, wal_between, far_behind, jobs, counts,
                    config, ledger)


def lake_rows(spark: Any, job: str, table: str) -> dict[str, Any]:
    columns = pg_cases.TABLES[table]
    return pg_cases.table_rows([tuple(r[c] for c in columns)
                                for r in spark.table(f"lake.{job}").collect()], columns)


@pytest.mark.reliability
def test_long_transaction_lands_its_later_update(captured: Captured, spark: Any) -> None:
    """#58.1: two updates of one row in one transaction, more than 1 MiB of WAL apart, both
    written more than 64 MiB of WAL before another transaction's commit: the lake holds the
    later one (a tie of their ref keys kept the first; then such changes stopped the batch).
    A row updated that far back and again after that commit holds the later update. The
    transaction in flight at the snapshot outranks the snapshot's row."""
    assert captured.wal_between > 1 << 20
    assert captured.far_behind > 64 << 20
    assert captured.counts.get("decode_errors", 0) == 0, captured.counts
    lake = lake_rows(spark, captured.jobs["orders"], "orders")
    assert lake["1"]["v"] == "second of two"
    assert lake["5"]["v"] == "after the commit meanwhile"
    assert lake["6"]["v"] == "second near"
    assert lake["4"]["v"] == "in flight at the snapshot"  # committed after the snapshot read
    assert lake == captured.tables["orders"]
    pg_cases.check(captured.messages, captured.tables)  # the same through the decoder alone


@pytest.mark.reliability
def test_unchanged_toast_columns_and_numeric_scale_above_precision(captured: Captured,
                                                                  spark: Any) -> None:
    """#58.8 and #58.6 on what Debezium wrote: updates leaving TOASTed columns unchanged
    (``__debezium_unavailable_value``) keep the lake's values; numeric(3,5) lands as
    decimal(5,5)."""
    job = captured.jobs["notes"]
    assert any(b"__debezium_unavailable_value" in v for v in captured.messages["notes"])
    assert dict(spark.table(f"raw.{job}").dtypes)["tiny"] == "decimal(5,5)"
    lake = lake_rows(spark, job, "notes")
    assert lake["1"]["body"] == "a" * BIG and lake["1"]["n"] == 2
    assert lake == captured.tables["notes"]


@pytest.mark.reliability
def test_far_change_open_during_an_incremental_snapshot_stops_the_batch(captured: Captured,
                                                                        spark: Any) -> None:
    """#58.1 on what Debezium wrote: an incremental snapshot (a signal) read ledger's row 1
    while a transaction that had changed it more than 64 MiB of WAL before the commit
    streamed before its own was open. The read carries a ``last`` and ranks above that
    change's own LSN, yet holds the row before it: the batch stops naming the read, nothing
    committed, rather than keep 'start' in the lake."""
    from python_ingest.config import load_settings
    from python_ingest.exceptions import ReadError
    from python_ingest.steps.jobs import run_ingest
    from python_ingest.tables.checkpoints import read_checkpoint
    from python_ingest.tables.names import JobTables

    payloads = [json.loads(v)["payload"] for v in captured.ledger]
    reads = [p for p in payloads if p["op"] == "r" and p["source"]["snapshot"] == "incremental"]
    assert {p["after"]["id"]: p["after"]["v"] for p in reads} == {1: "start", 2: "start"}
    assert all(json.loads(p["source"]["sequence"])[0] is not None for p in reads)
    change = next(p for p in payloads if p["op"] == "u")
    assert payloads.index(change) > payloads.index(reads[0])
    last, lsn = json.loads(change["source"]["sequence"])
    assert int(last) - int(change["source"]["lsn"]) > 64 << 20
    settings = load_settings(captured.config, env={})
    job = settings.job(captured.jobs["ledger"])
    with pytest.raises(ReadError, match="snapshot read .* was streamed while its transaction"):
        run_ingest(spark, settings, job)
    assert read_checkpoint(spark, JobTables(job.name).raw) is None


@pytest.mark.reliability
def test_a_blocking_snapshots_reads_rank_between_the_changes_around_it(
        captured: Captured) -> None:
    """#58.1 on what Debezium wrote: a blocking snapshot (a signal) of ledger between two
    changes of its row 2. Its reads carry no ``last`` before the one they name, and rank
    above every change streamed before them (the far change included, now committed) and
    below the change after."""
    from python_ingest.changelog import debezium

    payloads = [json.loads(v)["payload"] for v in captured.ledger]
    blocking = [p for p in payloads if p["op"] == "r" and p["source"]["snapshot"] in (
        "true", "first", "last", "first_in_data_collection", "last_in_data_collection")
        and json.loads(p["source"]["sequence"])[0] is not None]
    assert {p["after"]["id"]: p["after"]["v"] for p in blocking} == {
        1: "far, open at the read", 2: "before blocking"}
    reads = {debezium.ref_key(p, "position") for p in blocking}
    assert len(reads) == 1
    streamed = {p["after"]["v"]: debezium.ref_key(p, "position")
                for p in payloads if p["op"] == "u"}
    assert streamed["far, open at the read"] < min(reads)
    assert streamed["before blocking"] < min(reads) < streamed["after blocking"]
