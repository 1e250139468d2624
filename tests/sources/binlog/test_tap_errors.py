"""One value never stops a source: a value that cannot be published goes to the source's error
table (with its table, position, column and reason), while the tap, that table's other rows
and the other tables go on."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import fastavro
import pytest

from python_ingest.sources.binlog.columns import make_spec
from python_ingest.sources.tap import errors as errors_mod
from python_ingest.sources.tap.changes import Change, Envelope, Problem
from python_ingest.sources.tap.errors import ErrorSink, error_topic, publish
from python_ingest.sources.tap.producer import ChangelogProducer, Encoder
from python_ingest.sources.tap.registry import ERROR_SCHEMA, KeyChoice, TableShape
from tests.sources.binlog import canon
from tests.sources.binlog.lake import job_of, make_project, run_pipeline, scaffold

EDGE_BYTES = 999_985  # key + value: within Kafka's 1 000 000, over what librdkafka takes


def _payload_for(env: Any, table: str, key: bytes, total: int) -> int:
    """The LONGBLOB size that makes the change's message (key + Confluent-framed Avro value)
    ``total`` bytes long, sized with the table's registered schema."""
    settings = env.settings()
    (version,) = (env.tmp / "registry" / f"{env.database}.{table}").glob("*.avsc")
    encoder = Encoder(1, json.loads(version.read_text()))
    record = {"id": 2, "note": "edge", "payload": b"", "doc": None, "due": None,
              "amount": None, "_ref_key": (1 << 32) | 100_000, "_changed_columns": None,
              "_source": "mariadb", "_event_ts": int(time.time() * 1000),
              "_is_deleted": False, "_force_update": False,
              "_data_center": settings.source(env.source).data_center}
    size = total - len(key) - len(encoder.encode(dict(record))) - 2  # 3-byte length, not 1
    record["payload"] = b"\xab" * size
    assert len(key) + len(encoder.encode(dict(record))) == total
    return size


@pytest.mark.e2e
@pytest.mark.reliability
def test_poison_rows_go_to_the_error_table_and_the_tap_goes_on(tap_env: Any,
                                                               spark: Any) -> None:
    """Issue #9.11, through the real `sluice tap` process: a message a few bytes under Kafka's
    1 000 000 (librdkafka refuses it: before, every start of the tap crashed on it), a 3 MB
    value (left out, reported), and values that are odd but publishable as they are: JSON text
    that is not JSON (MariaDB's JSON is LONGTEXT with a CHECK, here switched off), the zero
    date, DECIMAL(65,30)'s limits. The error table names table, row key, binlog position and
    size; the table's other rows and another table go on."""
    env = tap_env
    make_project(env.tmp)
    env.sql("CREATE TABLE big (id INT NOT NULL PRIMARY KEY, note VARCHAR(20), payload LONGBLOB,"
            " doc JSON, due DATETIME, amount DECIMAL(65,30))",
            "CREATE TABLE small (id INT NOT NULL PRIMARY KEY, v VARCHAR(10))")
    written = scaffold(env)
    env.jobs.update(written.error_job)  # <source>__tap_errors, as the scaffold adds it
    env.write_config()
    edge = _payload_for(env, "big", b"2", EDGE_BYTES)
    tap = env.start_tap()
    try:
        start = env.master()
        env.sql("INSERT INTO big VALUES (1, 'ok', x'00ff', '{\"a\": [1, 2]}', "
                "'2024-02-29 12:00:00', -99999999999999999999999999999999999.999999999999999999"
                "999999999999)",
                f"INSERT INTO big VALUES (2, 'edge', REPEAT(x'ab', {edge}), NULL, NULL, NULL)",
                "INSERT INTO big VALUES (3, 'huge', REPEAT(x'cd', 3000000), NULL, NULL, NULL)",
                "SET SESSION check_constraint_checks = 0",
                "INSERT INTO big VALUES (4, 'odd', x'', '{not json', '0000-00-00 00:00:00', "
                "99999999999999999999999999999999999.999999999999999999999999999999)",
                "INSERT INTO small VALUES (1, 'a'), (2, 'b')",
                "UPDATE big SET note = CONCAT(note, '!') WHERE id IN (1, 2, 3)",  # tiny, still big
                "DELETE FROM small WHERE id = 1",
                "INSERT INTO small VALUES (3, 'c')",
                "DELETE FROM big WHERE id = 1")
        end = env.master()
        env.wait_caught_up()  # fails naming the tap's output if the tap died
        assert tap.poll() is None, "the tap stopped"
        out = env.stop_tap(tap)
    finally:
        env.close()
    assert tap.returncode == 0, out  # not stopped: no table was stopped either
    results = run_pipeline(spark, env)
    assert all(r.counts.get("decode_errors", 0) == 0 for r in results)
    big_job, small_job = job_of(env, "big"), job_of(env, "small")
    # the other table and the other rows of the table are equal to the source ...
    names = ["id", "v"]
    assert not canon.differences(canon.source_rows(env, "small"),
                                 canon.lake_rows(spark, f"lake.{small_job}", names), names)
    names = ["id", "note", "payload", "doc", "due", "amount"]
    expected = canon.source_rows(env, "big")
    for row in expected:
        if row["id"] in ("2", "3"):
            row["payload"] = None  # ... and the rows that had the values are there, without them
    assert len(expected) == 3
    assert not canon.differences(expected, canon.lake_rows(spark, f"lake.{big_job}", names),
                                 names)
    # the error table says which table, row, position, column, size and why
    errors = spark.table(f"lake.{env.source}__tap_errors").collect()
    assert sorted((e["row_key"], e["operation"]) for e in errors) == [
        ("2", "insert"), ("2", "update"), ("3", "insert"), ("3", "update")]
    for error in errors:
        assert error["table_name"] == f"{env.database}.big"
        assert error["column_name"] == "payload" and error["published"]
        assert "Kafka's limit of 1000000" in error["error"]
        size = edge if error["row_key"] == "2" else 3_000_000
        assert error["value_text"].startswith(f"{size} bytes: {'ab' if size == edge else 'cd'}")
        assert error["binlog_file"] == start[0] and start[1] < error["binlog_pos"] <= end[1]


@pytest.mark.e2e
def test_a_value_that_cannot_be_encoded_is_left_out_and_reported(
        broker: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The encoder refuses a value (here one of the wrong type, which the tap's conversion
    never produces): the change is published without it, the error record names it. A message
    the Kafka client refuses as too large all the same (here: the tap's own size check
    switched off) is reported as not published, and nothing waits for it."""
    from python_ingest.config import parse_source
    from python_ingest.kafka import broker as broker_mod
    from python_ingest.kafka import client as kafka_client

    source = parse_source("enc", {"topic_prefix": f"enc{id(tmp_path)}"})
    topic = f"{source.topic_base}.d.t"
    for name in (topic, error_topic(source)):
        broker_mod.ensure_topic(broker, name, 1)
    shape = TableShape("d", "t", (make_spec("id", "long", nullable=False),
                                  make_spec("n", "long")), KeyChoice("primary", ("id",)))
    encoder = Encoder(1, shape.avro())
    producer = ChangelogProducer(broker)
    sink = ErrorSink(producer, source, tmp_path / "registry")
    env = Envelope("mariadb", 0, None)
    record = {"id": 7, "n": "not a number", "_ref_key": 42, "_changed_columns": None,
              "_source": "mariadb", "_event_ts": 0, "_is_deleted": False,
              "_force_update": False, "_data_center": None}
    unkeyed = Change(None, dict(record), "insert", [Problem("id", "cannot convert")])
    assert publish(producer, topic, encoder, Change("7", record, "insert"), ("id",), sink, "d.t",
                   ("binlog.000001", 100), env)
    assert not publish(producer, topic, encoder, unkeyed, ("id",), sink, "d.t",
                       ("binlog.000001", 200), env)
    monkeypatch.setattr(errors_mod, "MAX_MESSAGE_BYTES", 10 * errors_mod.KAFKA_MESSAGE_LIMIT)
    shape_big = TableShape("d", "t", (make_spec("id", "long", nullable=False),
                                      make_spec("b", "bytes")), KeyChoice("primary", ("id",)))
    too_big = {**record, "id": 8, "n": None, "b": b"x" * 1_200_000}
    assert not publish(producer, topic, Encoder(1, shape_big.avro()),
                       Change("8", too_big, "insert"), ("id",), sink, "d.t",
                       ("binlog.000001", 300), env)
    producer.flush()
    assert producer.acks.in_flight == 0
    (message,) = kafka_client.read_range("confluent-kafka", broker, topic, 0, 0, 1, timeout_s=30)
    value = fastavro.schemaless_reader(io.BytesIO(message.value[5:]),
                                       fastavro.parse_schema(shape.avro()))
    assert value["id"] == 7 and value["n"] is None  # published without the value
    reported = [fastavro.schemaless_reader(io.BytesIO(m.value[5:]),
                                           fastavro.parse_schema(ERROR_SCHEMA))
                for m in kafka_client.read_range("confluent-kafka", broker, error_topic(source), 0,
                                                 0, 3, timeout_s=30)]
    assert [(r["column_name"], r["published"], r["binlog_pos"]) for r in reported] == [
        ("n", True, 100), ("id", False, 200), (None, False, 300)]
    assert "refuses a message of" in reported[2]["error"] and reported[2]["row_key"] == "8"
    assert "cannot encode" in reported[0]["error"] and reported[0]["error_id"] == "d.t@42:n"


@pytest.mark.e2e
@pytest.mark.reliability
def test_a_topic_that_takes_less_than_kafkas_default_stops_only_its_table(
        tap_env: Any) -> None:
    """A table's topic whose max.message.bytes is below what the tap may write (Kafka's default
    1 MB): before, the broker refused the big change and the tap died at every start (issue
    #9.11); now that table stops, naming the setting, and the other tables go on."""
    from kafka.admin import KafkaAdminClient, NewTopic

    env = tap_env
    env.sql("CREATE TABLE narrow (id INT NOT NULL PRIMARY KEY, payload LONGBLOB)",
            "CREATE TABLE other (id INT NOT NULL PRIMARY KEY, v VARCHAR(10))")
    admin = KafkaAdminClient(bootstrap_servers=env.bootstrap)
    admin.create_topics([NewTopic(env.topic("narrow"), 1, 1,
                                  topic_configs={"max.message.bytes": "200000"})])
    admin.close()
    env.add_jobs()
    env.tap_until_end()
    env.sql("INSERT INTO narrow VALUES (1, x'00'), (2, REPEAT(x'ab', 300000))",
            "INSERT INTO other VALUES (1, 'a'), (2, 'b')", "UPDATE other SET v = 'c'")
    tap = env.tap_until_end()
    assert list(tap.stopped) == [f"{env.database}.narrow"]
    reason = tap.stopped[f"{env.database}.narrow"]["error"]
    assert "max.message.bytes" in reason and "200000" in reason
    assert env.checkpoint()["stopped"][f"{env.database}.narrow"]["error"] == reason
    assert env.assert_equal("other") == 2
    assert env.messages("narrow") == []
