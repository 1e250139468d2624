"""Debezium itself (issue #37, part 3): Kafka Connect (Apache Kafka's standalone worker) with
Debezium's MariaDB connector reading a private MariaDB, writing to the test broker in JSON and
in Avro with the Schema Registry (Apicurio's AvroConverter, Confluent's framing); sluice
scaffolds each topic and runs the pipeline; each lake equals the MariaDB table.

One worker runs both connectors (one JSON, one Avro) on one database under one workload, and
one pipeline run lands both topics: the Avro case costs a connector and a job, not a second
worker, server and run. Each connector starts with ``snapshot.mode=initial`` while the random
workload already runs, so its snapshot (``op: r``) hands over to its stream under load: a gap
or a stale snapshot row would leave the lake unequal to the table.

A second table, ``kinds`` (tests/sources/debezium/cases.py), holds the column types whose JSON
form went wrong and gains a column while the connectors stream: its JSON events are checked
through sluice's decoder (the added column stops a job until its schema has it; then the rows
equal the table) and, with ``SLUICE_SAVE_DEBEZIUM_CASES=1``, saved as the fixture the fast
unit test replays (tests/sources/debezium/cases/).
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.sources.binlog.conftest import mariadb  # noqa: F401  # the private server fixture
from tests.sources.binlog.lake import make_project
from tests.sources.debezium import cases

pytestmark = [pytest.mark.debezium, pytest.mark.e2e]
MARKER = 1_000_000
FORMATS = {"json": "json", "confluent-avro": "avro"}  # value format: job and topic prefix


def workload(server: Any, database: str, seed: int, stop: threading.Event) -> None:
    """Random inserts, updates (some in multi-statement transactions), deletes and key
    changes on ``items``, about 100 a second until ``stop``."""
    rng = random.Random(seed)
    with server.root(database) as conn, conn.cursor() as cur:
        while not stop.wait(0.01):
            cur.execute("SELECT id FROM items WHERE id < %s", (MARKER,))
            ids = [r[0] for r in cur.fetchall()]
            kind = rng.random()
            if kind < 0.35 or not ids:
                new = rng.randrange(1, 100_000)
                cur.execute("INSERT IGNORE INTO items VALUES (%s, %s, %s, NOW(6))",
                            (new, f"n{rng.randrange(1000)}", Decimal(rng.randrange(10**6)) / 100))
            elif kind < 0.75:
                cur.execute("BEGIN")
                for key in rng.sample(ids, min(3, len(ids))):
                    cur.execute("UPDATE items SET name = %s, price = price + 1, upd = NOW(6) "
                                "WHERE id = %s", (f"u{rng.randrange(1000)}", key))
                cur.execute("COMMIT")
            elif kind < 0.9:
                cur.execute("DELETE FROM items WHERE id = %s", (rng.choice(ids),))
            else:
                cur.execute("UPDATE IGNORE items SET id = %s WHERE id = %s",
                            (rng.randrange(100_000, 200_000), rng.choice(ids)))


def wait_for_marker(bootstrap: str, topic: str, timeout_s: float = 120) -> None:
    """Until the marker row's change is in ``topic`` (its name is in the message, whether
    JSON or Avro)."""
    from python_ingest.exceptions import BrokerError
    from python_ingest.kafka.client import partition_offsets, read_range

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            partitions = partition_offsets(bootstrap, topic)
        except BrokerError:  # no topic yet: the snapshot has not produced
            partitions = []
        for p in partitions:
            for message in read_range("confluent-kafka", bootstrap, topic, p.partition,
                                      p.earliest, p.end, 30):
                if message.value and b"marker" in message.value:
                    return
        time.sleep(1)
    raise AssertionError(f"Debezium did not deliver the marker row to {topic}")


def topic_messages(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """Every (key, value) of a topic, partition by partition."""
    from python_ingest.kafka.client import partition_offsets, read_range

    return [(m.key, m.value) for p in partition_offsets(bootstrap, topic)
            for m in read_range("confluent-kafka", bootstrap, topic, p.partition, p.earliest,
                                p.end, 30)]


def wait_for(bootstrap: str, topic: str, needle: bytes, timeout_s: float = 120) -> None:
    """Until a message of ``topic`` holds ``needle``."""
    from python_ingest.exceptions import BrokerError

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if any(v and needle in v for _, v in topic_messages(bootstrap, topic)):
                return
        except BrokerError:  # no topic yet
            pass
        time.sleep(1)
    raise AssertionError(f"Debezium did not deliver {needle!r} to {topic}")


@dataclass(frozen=True)
class Landed:
    """The MariaDB database both connectors read, and the job of each value format."""

    database: str
    jobs: dict[str, str]
    counts: dict[str, dict[str, int]]
    kinds: list[tuple[bytes | None, bytes | None]]  # the JSON connector's kinds events
    kinds_table: dict[str, dict[str, object]]  # the kinds table at the end


@pytest.fixture(scope="module")
def landed(spark: Any, broker: str, mariadb: Any, schema_registry: str,  # noqa: F811
           tmp_path_factory: pytest.TempPathFactory, workdir: Path) -> Landed:
    """One Connect worker with a JSON and an Avro connector on one database under a random
    workload, both topics scaffolded and run through the pipeline in one run."""
    from python_ingest.config import load_settings
    from python_ingest.runtime import apicurio, connect
    from python_ingest.scaffold.debezium import scaffold
    from python_ingest.steps.pipeline import run_all
    from tests.conftest import write_config

    tmp_path = tmp_path_factory.mktemp("connect")
    database = f"dbz{int(time.time() * 1000) % 10**8}"
    with mariadb.root() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {database}")
        cur.execute(f"CREATE TABLE {database}.items (id INT PRIMARY KEY, name VARCHAR(20), "
                    "price DECIMAL(12,2), upd DATETIME(6))")
        cur.executemany(f"INSERT INTO {database}.items VALUES (%s, %s, %s, NOW(6))",
                        [(i, f"s{i}", Decimal(i) / 4) for i in range(1, 301)])
        cur.execute(cases.KINDS_DDL.format(db=database))
        cur.executemany(f"INSERT INTO {database}.kinds VALUES (%s, %s, %s, %s, %s, %s, %s)",
                        cases.KINDS_ROWS)
        cur.execute("CREATE USER IF NOT EXISTS 'dbz'@'127.0.0.1' IDENTIFIED BY 'dbz-secret'")
        cur.execute("GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, BINLOG MONITOR, "
                    "LOCK TABLES ON *.* TO 'dbz'@'127.0.0.1'")
        # the signal table: an incremental snapshot of items once the streams run (its
        # watermarks are the connector's own inserts)
        cur.execute(f"CREATE TABLE {database}.debezium_signal (id VARCHAR(64) PRIMARY KEY, "
                    "type VARCHAR(32) NOT NULL, data VARCHAR(2048))")
        cur.execute(f"GRANT INSERT, UPDATE, DELETE ON {database}.debezium_signal "
                    "TO 'dbz'@'127.0.0.1'")
    converters = {"json": {},  # the worker's default: JsonConverter with schemas
                  "confluent-avro": connect.avro_converters(
                      schema_registry.removesuffix(apicurio.CCOMPAT))}
    server_id = 5400 + random.randrange(1000)
    connectors = [{
        "name": f"{database}{tag}", "tasks.max": 1,
        "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
        "database.hostname": "127.0.0.1", "database.port": mariadb.port,
        "database.user": "dbz", "database.password": "dbz-secret",
        "database.server.id": server_id + number, "topic.prefix": f"{database}{tag}",
        "database.include.list": database, "snapshot.mode": "initial",
        "signal.data.collection": f"{database}.debezium_signal",
        "schema.history.internal": "io.debezium.storage.file.history.FileSchemaHistory",
        "schema.history.internal.file.filename": str(tmp_path / f"history-{tag}.dat"),
        **converters[value_format]}
        for number, (value_format, tag) in enumerate(FORMATS.items())]
    stop = threading.Event()
    writer = threading.Thread(target=workload, args=(mariadb, database, 7, stop))
    writer.start()  # the snapshots meet a running workload, and the streams take over
    try:
        worker = connect.start_standalone(tmp_path / "connect", broker, connectors)
        time.sleep(5)  # the snapshots and the first streamed changes under the workload
    finally:
        stop.set()
        writer.join()
    topics = {f: f"{database}{tag}.{database}.items" for f, tag in FORMATS.items()}
    kinds_topic = f"{database}{FORMATS['json']}.{database}.kinds"
    try:
        with mariadb.root(database) as conn, conn.cursor() as cur:
            for statement in cases.KINDS_STREAM:
                cur.execute(statement.format(db=database))
            cur.execute("SELECT " + ", ".join(cases.COLUMNS) + " FROM kinds")
            kinds_table = cases.table_rows(list(cur.fetchall()))
            # an incremental snapshot of items (both connectors see the signal), then
            # changes of rows it read: they must outrank the reads
            signal = json.dumps({"data-collections": [f"{database}.items"],
                                 "type": "incremental"})
            cur.execute("INSERT INTO debezium_signal VALUES ('snap-items', 'execute-snapshot', "
                        "%s)", (signal,))
            for topic in topics.values():
                wait_for(broker, topic, b"incremental")  # JSON or Avro
            cur.execute("UPDATE items SET name = 'after the read', upd = NOW(6) "
                        "WHERE id < %s ORDER BY id LIMIT 40", (MARKER,))
            cur.execute("INSERT INTO items VALUES (%s, 'marker', 0, NOW(6))", (MARKER,))
        for topic in topics.values():
            wait_for_marker(broker, topic)
        wait_for(broker, kinds_topic, cases.LAST_TIP)
        kinds = topic_messages(broker, kinds_topic)
    finally:
        worker.stop()
    if os.environ.get("SLUICE_SAVE_DEBEZIUM_CASES"):
        cases.save(kinds, kinds_table)

    make_project(tmp_path)
    config = write_config(tmp_path / "sluice.yml", workdir, broker, {},
                          schema_registry={"url": schema_registry})
    jobs = {}
    for value_format, topic in topics.items():
        result = scaffold(load_settings(config, env={}), [topic], tmp_path, config,
                          value_format=value_format, say=None,
                          job_prefix=f"{FORMATS[value_format]}_")
        jobs[value_format] = result.jobs_added[0]
    runs = run_all(spark, load_settings(config, env={}), list(jobs.values()), max_parallel=2)
    return Landed(database, jobs, {f: dict(r.counts) for f, r in zip(jobs, runs, strict=True)},
                  kinds, kinds_table)


@pytest.mark.parametrize("value_format", [
    "json", pytest.param("confluent-avro", marks=pytest.mark.registry)])
def test_debezium_on_kafka_connect_to_the_lake_equals_mariadb(
        landed: Landed, value_format: str, spark: Any, mariadb: Any) -> None:  # noqa: F811
    job = landed.jobs[value_format]
    assert landed.counts[value_format].get("decode_errors", 0) == 0, landed.counts
    lake = {r["id"]: (r["name"], r["price"], r["upd"].replace(tzinfo=None))
            for r in spark.table(f"lake.{job}").collect()}
    with mariadb.root(landed.database) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, name, price, upd FROM items")
        source = {r[0]: (r[1], r[2], r[3]) for r in cur.fetchall()}
    assert len(source) > 250 and lake == source
    raw = spark.table(f"raw.{job}")
    # Debezium's types as docs/debezium.md lists them, whichever converter wrote them
    types = dict(raw.dtypes)
    assert [types[c] for c in ("id", "name", "price", "upd")] == [
        "bigint", "string", "decimal(12,2)", "timestamp"], types
    # the snapshot's reads share its position; the stream's changes come after it, deletes too
    by_ref = sorted((r["count"] for r in raw.groupBy("_ref_key").count().collect()),
                    reverse=True)
    assert by_ref[0] >= 250 and sum(by_ref[1:]) > 100, by_ref[:5]
    assert json.dumps(sorted(r["_is_deleted"] for r in raw.select("_is_deleted").distinct()
                             .collect())) == "[false, true]"


@pytest.mark.reliability
def test_real_json_events_of_every_kind_and_an_added_column_decode_to_the_table(
        landed: Landed) -> None:
    """Issue #50.3 on what Debezium really wrote: DOUBLE/FLOAT (``double``/``float`` in the
    JsonConverter's schema), BLOB and decimals as base64, a pre-1970 DATETIME, and a column
    added while streaming (tests/sources/debezium/cases.py)."""
    cases.check_kinds(landed.kinds, landed.kinds_table)
