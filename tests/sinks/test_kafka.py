"""The Kafka sink on a hand-made lake table of every column type: Avro values that decode to
the lake's values, null values for deleted keys, the position file written after the acks,
and a re-send (position lost) that leaves the last value per key unchanged."""

from __future__ import annotations

import datetime as dt
import io
from typing import Any

import fastavro
import pytest

from python_ingest.config.dispersal import KafkaTarget
from python_ingest.kafka.client import partition_offsets, read_range
from python_ingest.sinks.changes import lake_position
from python_ingest.sinks.kafka import avro_schema, disperse_kafka, warehouse
from python_ingest.sinks.state import PositionFile
from python_ingest.steps.merge.index import INDEX_COLUMNS
from python_ingest.tables.formats import ensure_table
from python_ingest.tables.names import JobModels, JobTables
from tests.sinks.handmade import COLUMNS, TRICKY, WHEN, row, write_batch

pytestmark = [pytest.mark.dispersal, pytest.mark.e2e]


def consume(bootstrap: str, topic: str, schema: Any) -> tuple[int, dict[str, Any]]:
    """(messages, last decoded value per key) of the whole topic."""
    count, last = 0, {}
    for part in partition_offsets(bootstrap, topic):
        for message in read_range("confluent-kafka", bootstrap, topic, part.partition,
                                  part.earliest, part.end, timeout_s=30):
            count += 1
            assert message.key is not None
            last[message.key.decode()] = None if message.value is None else \
                fastavro.schemaless_reader(io.BytesIO(message.value), schema, None)
    return count, last


def as_avro(r: dict[str, Any]) -> dict[str, Any]:
    """A lake row as the Avro value decodes (fastavro: timestamps aware UTC, bytes)."""
    return {k: v for k, v in r.items() if k != "_is_deleted"}


def test_every_type_deletes_and_a_resend_reach_the_topic(
        spark: Any, broker: str, job_name: str, tmp_path: Any) -> None:
    tables = JobTables(job_name, JobModels(staging=f"stg_{job_name}", lake=job_name))
    assert tables.lake is not None
    ensure_table(spark, tables.lake, COLUMNS)
    ensure_table(spark, tables.index, INDEX_COLUMNS)
    target = KafkaTarget(name="events", topic=f"{job_name}.lake")
    lake = {"a": row("a", 1, 1, c_string=TRICKY), "b": row("b", 1, 2)}
    write_batch(spark, tables, 1, list(lake.values()), [])
    schema = fastavro.parse_schema(avro_schema(spark, tables))
    first = disperse_kafka(spark, tables, target, lake_position(spark, tables), tmp_path, broker)
    assert (first.since, first.upserted, first.deleted) == (None, 2, 0)
    count, got = consume(broker, target.topic, schema)
    assert count == 2
    a = got["a"]
    assert a["c_timestamp"] == WHEN and a["c_date"] == dt.date(1, 1, 1)
    assert a["c_map"] == {"k": 1, "none": None} and a["c_struct"] == {"a": 1, "b": None}
    assert got == {k: as_avro(v) for k, v in lake.items()}

    # the position lost (a crash before it was written): everything is sent again, and the
    # last value per key is what it was
    PositionFile(tmp_path, warehouse(spark), job_name, "events").path.unlink()
    again = disperse_kafka(spark, tables, target, lake_position(spark, tables), tmp_path, broker)
    assert again.since is None and again.upserted == 2
    count, got_again = consume(broker, target.topic, schema)
    assert count == 4 and got_again == got

    lake["c"] = row("c", 2, 3)
    write_batch(spark, tables, 2, [lake["c"]], ["a"])
    second = disperse_kafka(spark, tables, target, lake_position(spark, tables), tmp_path,
                            broker)
    assert (second.upserted, second.deleted) == (1, 1)
    stored = PositionFile(tmp_path, warehouse(spark), job_name, "events").read()
    assert stored == second.until
    count, got = consume(broker, target.topic, schema)
    assert count == 6 and got == {"a": None, "b": as_avro(lake["b"]), "c": as_avro(lake["c"])}
