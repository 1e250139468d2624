"""``source: debezium`` jobs (issue #37, part 2): Debezium change events, hand-built as
Debezium's MariaDB connector writes them (tests/sources/debezium/events.py), through a real
broker, a real Schema Registry (Apicurio) and Spark into raw and lake tables.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from python_ingest.kafka import broker as broker_mod
from tests.conftest import confluent_avro_serializers, sluice_cmd
from tests.sources.binlog.lake import make_project
from tests.sources.debezium import events as ev

pytestmark = [pytest.mark.debezium]
PREFIX = "dbz"


def avro_job(topic: str, schema_file: Path) -> dict[str, Any]:
    return {"source": "debezium", "topic": topic, "value_format": "confluent-avro",
            "schema_ids": {1: str(schema_file)}, "row_key": ["id"]}


def normal(value: Any) -> Any:
    """A value as the decoder gives it (Spark's session is in UTC and hands out naive
    datetimes)."""
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return bytes(value) if isinstance(value, bytearray | memoryview) else value


def test_every_debezium_type_decodes_to_its_lake_value(tmp_path: Path, make_settings: Any
                                                       ) -> None:
    """Avro (by schema id), JSON with and without the schema envelope: the same raw rows."""
    import io

    import fastavro

    from python_ingest.changelog.decode import Decoder
    from python_ingest.changelog.schema import ChangelogSchema

    envelope = ev.envelope_avro(PREFIX, "items")
    (tmp_path / "envelope.avsc").write_text(json.dumps(envelope))
    (tmp_path / "row.avsc").write_text(json.dumps(ev.row_avro(PREFIX, "items")))
    settings = make_settings({
        "avro": avro_job("t", tmp_path / "envelope.avsc"),
        "json": {"source": "debezium", "topic": "t", "value_format": "json",
                 "schema": str(tmp_path / "row.avsc"), "row_key": ["id"]}})
    decoders = {name: Decoder(ChangelogSchema.load(settings.job(name), settings.root))
                for name in ("avro", "json")}
    assert dict(decoders["json"].schema.payload) == {
        "id": "bigint", "name": "string", "price": "decimal(10,2)", "big_price": "string",
        "ratio": "string", "born": "date", "updated": "timestamp", "updated_us": "timestamp",
        "created_ns": "timestamp", "seen": "timestamp", "opens": "string", "doc": "string",
        "uid": "string", "flags": "bigint", "active": "boolean", "yr": "bigint",
        "shape": "binary", "rating": "double", "blob": "binary"}
    parsed = fastavro.parse_schema(envelope)
    refs: dict[int, list[int]] = {}
    for key, event in ev.workload():
        if event is None:
            continue
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, event)
        values = {"avro": b"\x00" + (1).to_bytes(4, "big") + buffer.getvalue(),
                  "json": ev.json_event(event, PREFIX, "items", with_schema=True),
                  "bare": ev.json_event(event, PREFIX, "items", with_schema=False)}
        rows = [decoders["json" if kind == "bare" else kind].decode(value)
                for kind, value in values.items()]
        assert rows[0] == rows[1] == rows[2]
        image = event["before"] if event["op"] == "d" else event["after"]
        wanted = ev.expected(image["id"], image["name"])
        assert {k: normal(rows[0][k]) for k in wanted} == wanted
        assert rows[0]["_is_deleted"] == (event["op"] == "d")
        assert rows[0]["_source"] == "mariadb" and rows[0]["_row_key"] == str(image["id"])
        refs.setdefault(key, []).append(rows[0]["_ref_key"])
    # every row's changes are ordered by their binlog position, snapshot reads first
    assert all(r == sorted(set(r)) for r in refs.values()), refs
    assert refs[1][0] < refs[4][0]  # the snapshot's rows come before the stream's


def produce_avro(bootstrap: str, registry_url: str, topic: str,
                 events: list[tuple[int, dict[str, Any] | None]]) -> None:
    """As Debezium's AvroConverter does: keys and values registered under <topic>-key and
    <topic>-value (TopicNameStrategy), tombstones with a key and a null value."""
    from confluent_kafka import Producer
    from confluent_kafka.serialization import MessageField, SerializationContext

    broker_mod.ensure_topic(bootstrap, topic, 2)
    key_schema = {"type": "record", "name": "Key", "namespace": topic,
                  "fields": [{"name": "id", "type": "int"}], "connect.name": f"{topic}.Key"}
    keys, values = confluent_avro_serializers(
        registry_url, key_schema, ev.envelope_avro(PREFIX, topic.split(".")[-1]))
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for key, event in events:
        producer.produce(topic, key=keys({"id": key}, SerializationContext(topic,
                                                                          MessageField.KEY)),
                         value=None if event is None else values(
                             event, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(30) == 0


@pytest.mark.registry
@pytest.mark.e2e
def test_avro_topic_scaffolded_and_run_ends_equal_to_the_source(
        spark: Any, broker: str, schema_registry: str, tmp_path: Path, workdir: Path,
        job_name: str) -> None:
    """The scaffold as users run it (the CLI), then the whole pipeline: the lake holds the
    table as the workload left it, every type as docs/debezium.md lists it."""
    from python_ingest.config import load_settings
    from python_ingest.steps.pipeline import run_all
    from python_ingest.tables.names import JobTables
    from tests.conftest import write_config

    topic = f"{PREFIX}.shop.{job_name}"
    produce_avro(broker, schema_registry, topic, ev.workload())
    make_project(tmp_path)
    config = write_config(tmp_path / "sluice.yml", workdir, broker, {},
                          schema_registry={"url": schema_registry})
    done = sluice_cmd(config, "debezium", "scaffold", topic)
    assert done.returncode == 0, done.stdout + done.stderr
    job = f"shop_{job_name}"
    assert f"{topic} -> job {job}, row key (id)" in done.stdout, done.stdout
    assert yaml.safe_load(config.read_text())["jobs"][job] == {
        "source": "debezium", "topic": topic, "value_format": "confluent-avro", "row_key": ["id"],
        "reader": "confluent-kafka"}
    again = sluice_cmd(config, "debezium", "scaffold", topic)
    assert "none (all present)" in again.stdout, again.stdout

    settings = load_settings(config, env={})
    runs = run_all(spark, settings, [job])
    assert runs[0].counts["read"] == 11, runs[0].counts  # two tombstones skipped
    raw = spark.table(JobTables(job).raw)
    assert raw.count() == 11 and raw.where("_is_deleted").count() == 2
    assert spark.table(JobTables(job).raw_errors).count() == 0
    lake = {r["id"]: r.asDict() for r in spark.table(f"lake.{job}").collect()}
    assert {i: r["name"] for i, r in lake.items()} == ev.FINAL
    for i, name in ev.FINAL.items():
        wanted = ev.expected(i, name)
        assert {k: normal(lake[i][k]) for k in wanted} == wanted


@pytest.mark.e2e
@pytest.mark.reliability
def test_json_topic_lands_raw_rows_and_skips_tombstones(
        spark: Any, broker: str, tmp_path: Path, workdir: Path, job_name: str) -> None:
    """JsonConverter events with their schema envelope: the scaffold writes the row's .avsc."""
    from confluent_kafka import Producer

    from python_ingest.config import load_settings
    from python_ingest.scaffold.debezium import scaffold
    from python_ingest.steps.jobs import run_ingest
    from python_ingest.tables.names import JobTables
    from tests.conftest import write_config

    topic = f"{PREFIX}.shop.{job_name}"
    broker_mod.ensure_topic(broker, topic, 1)
    producer = Producer({"bootstrap.servers": broker})
    for key, event in ev.workload():
        producer.produce(topic, key=json.dumps({"id": key}).encode(),
                         value=None if event is None else ev.json_event(event, PREFIX, "items",
                                                                         with_schema=True))
    assert producer.flush(30) == 0
    config = write_config(tmp_path / "sluice.yml", workdir, broker, {})
    result = scaffold(load_settings(config, env={}), [topic], tmp_path, config,
                      value_format="json", say=None)
    job = f"shop_{job_name}"
    assert result.jobs_added == [job] and (tmp_path / "schemas/debezium" / f"{job}.avsc").exists()
    settings = load_settings(config, env={})
    ingested = run_ingest(spark, settings, settings.job(job))
    assert (ingested.read, ingested.landed, ingested.errors) == (11, 11, 0)
    rows = spark.table(JobTables(job).raw).orderBy("_kafka_offset").collect()
    assert [(r["id"], r["_is_deleted"]) for r in rows][-4:] == [
        (2, True), (3, True), (30, False), (1, False)]
    assert [r["name"] for r in rows if r["id"] == 1] == ["snap1", "upd1", "last1"]
    assert normal(rows[0]["seen"]) == ev.expected(1, "snap1")["seen"]
    assert [r["blob"] for r in rows[:2]] == [ev.expected(i, "")["blob"] for i in (1, 2)]

    # issue #50: ALTER TABLE items ADD tip decimal(10,2): the events carry it; issue #58.5:
    # the job follows it in the same run (its .avsc gains the column, the raw table too)
    tip = ("tip", "bytes", ev.DECIMAL, {"scale": "2", "connect.decimal.precision": "10"})
    event = ev.change("u", ev.row(4, "upd4"), {**ev.row(4, "tipped"), "tip": Decimal("-3.25")},
                      ev.source(8, file="mariadb-bin.000003"))
    ev.COLUMNS.append(tip)
    try:
        value = ev.json_event(event, PREFIX, "items", with_schema=True)
    finally:
        ev.COLUMNS.remove(tip)
    producer.produce(topic, key=json.dumps({"id": 4}).encode(), value=value)
    assert producer.flush(30) == 0
    ingested = run_ingest(spark, settings, settings.job(job))
    assert (ingested.read, ingested.landed, ingested.errors) == (1, 1, 0)
    last = spark.table(JobTables(job).raw).where("name = 'tipped'").collect()
    assert [(r["id"], r["tip"]) for r in last] == [(4, Decimal("-3.25"))]
    assert "tip" in (tmp_path / "schemas/debezium" / f"{job}.avsc").read_text()
    said: list[str] = []  # the scaffold run again finds nothing left to add
    scaffold(load_settings(config, env={}), [topic], tmp_path, config, value_format="json",
             say=said.append)
    assert not any("added column(s)" in line for line in said), said


def test_ordering_by_source_position_per_connector() -> None:
    """``_ref_key`` from the source position: binlog file/pos/row or GTID, PostgreSQL's LSN,
    the documented fallback; snapshot reads before the stream; what cannot land says why."""
    from python_ingest.changelog.debezium import DebeziumFormat, flatten, parse_json, ref_key
    from python_ingest.exceptions import DecodeError

    def at(op: str = "u", **source: Any) -> dict[str, Any]:
        return {"op": op, "source": source, "ts_ms": 1}

    binlog = [at("r", connector="mariadb", file="bin.000007", pos=900, row=0),
              at(connector="mariadb", file="bin.000007", pos=900, row=0),
              at(connector="mariadb", file="bin.000007", pos=900, row=3),
              at(connector="mariadb", file="bin.000007", pos=950, row=0),
              at(connector="mysql", file="bin.000008", pos=4, row=0)]
    refs = [ref_key(e, "position") for e in binlog]
    assert refs == sorted(set(refs)) and refs[1] == (7 << 32) | 900
    failover = [at("r", connector="mariadb", file="a.000009", pos=5),
                at(connector="mariadb", file="a.000009", pos=7000, gtid="0-1-41"),
                at(connector="mariadb", file="b.000001", pos=300, gtid="0-2-42")]
    refs = [ref_key(e, "gtid") for e in failover]
    assert refs == sorted(set(refs)) and refs[0] == 0
    with pytest.raises(DecodeError, match="without a GTID"):
        ref_key(at(connector="mariadb", file="a.000001", pos=4), "gtid")
    postgres = [at("r", connector="postgresql", lsn=5000, sequence='["4000","5000"]'),
                at("c", connector="postgresql", lsn=5000, sequence='["4000","5000"]'),
                at("d", connector="postgresql", lsn=5100, sequence='["5050","5100"]')]
    refs = [ref_key(e, "position") for e in postgres]
    assert refs == sorted(set(refs)) and refs[1] == ((5000 // 16 + 1) << 22) | 1
    assert ref_key(at(connector="sqlserver", ts_ms=1700, ts_us=1_700_123), "position") \
        == 1_700_123
    assert ref_key(at(connector="oracle", ts_ms=1700), "position") == 1_700_000

    fmt = DebeziumFormat("json", (), ("id",))
    row = flatten({"op": "d", "before": {"id": 5}, "after": None,
                   "source": {"connector": "postgresql", "lsn": 77, "ts_ms": 9}}, fmt)
    assert row == {"id": 5, "_ref_key": ((77 // 16 + 1) << 22) | 1, "_source": "postgresql",
                   "_event_ts": 9, "_is_deleted": True, "_changed_columns": None}
    # a JsonConverter message whose row has a column named payload, the text in values too
    body = {"schema": {"type": "struct", "fields": [{"field": "payload", "type": "string"}]},
            "payload": {"op": "c", "after": {"id": 6, "payload": {"payload": '"payload":'}},
                        "source": {"connector": "postgresql", "lsn": 78}}}
    for separators in ((",", ":"), (", ", ": ")):
        event = parse_json(json.dumps(body, separators=separators).encode())
        assert event == body["payload"]
    for event, reason in [({"op": "t", "source": {}}, "truncate"),
                          ({"op": "d", "before": None, "source": {}}, "REPLICA IDENTITY FULL"),
                          ({"schema": 1}, "not a Debezium change event")]:
        with pytest.raises(DecodeError, match=reason):
            flatten(event, fmt)

