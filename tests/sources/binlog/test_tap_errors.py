"""One value never stops a source: a value that cannot be published goes to the source's error
table (with its table, position, column and reason), while the tap, that table's other rows
and the other tables go on."""

from __future__ import annotations

import io
from typing import Any

import fastavro
import pytest

from python_ingest.sources.binlog.columns import make_spec
from python_ingest.sources.binlog.errors import ErrorSink, error_topic, publish
from python_ingest.sources.binlog.events import Change, Envelope, Problem
from python_ingest.sources.binlog.producer import ChangelogProducer, Encoder
from python_ingest.sources.binlog.registry import ERROR_SCHEMA, KeyChoice, TableShape
from tests.sources.binlog import canon
from tests.sources.binlog.lake import make_project, run_pipeline, scaffold


@pytest.mark.e2e
def test_a_value_too_big_for_kafka_goes_to_the_error_table_and_the_rest_goes_on(
        tap_env: Any, spark: Any) -> None:
    env = tap_env
    make_project(env.tmp)
    env.sql("CREATE TABLE big (id INT NOT NULL PRIMARY KEY, note VARCHAR(20), payload LONGBLOB)",
            "CREATE TABLE small (id INT NOT NULL PRIMARY KEY, v VARCHAR(10))")
    written = scaffold(env)
    env.jobs.update(written.error_job)  # <source>__tap_errors, as the scaffold adds it
    env.write_config()
    env.tap_until_end()
    env.sql("INSERT INTO big VALUES (1, 'ok', x'00ff'), (2, 'too big', REPEAT(x'ab', 1500000)),"
            " (3, 'after', x'')",
            "INSERT INTO small VALUES (1, 'a'), (2, 'b')",
            "UPDATE big SET note = CONCAT(note, '!')",  # every row, the big one included
            "DELETE FROM small WHERE id = 1",
            "INSERT INTO small VALUES (3, 'c')",
            "DELETE FROM big WHERE id = 3")
    start = env.master()
    tap = env.tap_until_end()
    assert not tap.stopped and tap.stats.errors == 2  # the insert and the update of row 2
    assert env.checkpoint()["file"] == env.master()[0] and env.master() >= start
    results = run_pipeline(spark, env)
    assert all(r.counts.get("decode_errors", 0) == 0 for r in results)
    jobs = {n: j for n, j in env.jobs.items()}
    big_job = next(n for n, j in jobs.items() if j["topic"] == env.topic("big"))
    small_job = next(n for n, j in jobs.items() if j["topic"] == env.topic("small"))
    # the other table and the other rows of the table are equal to the source ...
    names = ["id", "v"]
    assert not canon.differences(canon.source_rows(env, "small"),
                                 canon.lake_rows(spark, f"lake.{small_job}", names), names)
    names = ["id", "note", "payload"]
    expected = canon.source_rows(env, "big")
    for row in expected:
        if row["id"] == "2":
            row["payload"] = None  # ... and the row that had the value is there, without it
    assert not canon.differences(expected, canon.lake_rows(spark, f"lake.{big_job}", names),
                                 names)
    # the error table says which table, position, column and why
    errors = spark.table(f"lake.{env.source}__tap_errors").collect()
    assert len(errors) == 2
    for error in errors:
        assert error["table_name"] == f"{env.database}.big"
        assert error["column_name"] == "payload" and error["published"]
        assert "over Kafka's limit of 1000000" in error["error"]
        assert error["value_text"].startswith("1500000 bytes: abab")
        assert error["binlog_file"] == start[0] and 0 < error["binlog_pos"] <= start[1]
        assert error["row_key"] == "2"
    assert {e["operation"] for e in errors} == {"insert", "update"}


@pytest.mark.e2e
def test_a_value_that_cannot_be_encoded_is_left_out_and_reported(broker: str,
                                                                 tmp_path: Any) -> None:
    """The encoder refuses a value (here one of the wrong type, which the tap's conversion
    never produces): the change is published without it, the error record names it."""
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
    producer.flush()
    (message,) = kafka_client.read_range("kafka-python", broker, topic, 0, 0, 1, timeout_s=30)
    value = fastavro.schemaless_reader(io.BytesIO(message.value[5:]),
                                       fastavro.parse_schema(shape.avro()))
    assert value["id"] == 7 and value["n"] is None  # published without the value
    reported = [fastavro.schemaless_reader(io.BytesIO(m.value[5:]),
                                           fastavro.parse_schema(ERROR_SCHEMA))
                for m in kafka_client.read_range("kafka-python", broker, error_topic(source), 0,
                                                 0, 2, timeout_s=30)]
    assert [(r["column_name"], r["published"], r["binlog_pos"]) for r in reported] == [
        ("n", True, 100), ("id", False, 200)]
    assert "cannot encode" in reported[0]["error"] and reported[0]["error_id"] == "d.t@42:n"
