"""A Schema Registry over HTTP (issue #37, part 1): messages produced with confluent-kafka's
own AvroSerializer against a real Apicurio Registry (tests/conftest.py ``schema_registry``),
read back by sluice with the writers' schemas fetched by id.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from python_ingest.kafka import broker as broker_mod
from python_ingest.kafka.client import partition_offsets, read_range
from tests.conftest import confluent_avro_serializers

pytestmark = [pytest.mark.registry, pytest.mark.e2e]

V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "order_id", "type": "long"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10,
                                "scale": 2}},
    {"name": "placed_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "_ref_key", "type": "long"},
    {"name": "_is_deleted", "type": "boolean", "default": False},
]}
# the next version: an added optional field (BACKWARD compatible)
V2 = {**V1, "fields": [*V1["fields"][:3],
                       {"name": "coupon", "type": ["null", "string"], "default": None},
                       *V1["fields"][3:]]}


def produce_avro(bootstrap: str, registry_url: str, topic: str, schema: dict[str, Any],
                 records: list[dict[str, Any]]) -> None:
    """Produce as a Confluent-stack producer does: AvroSerializer registers the schema under
    ``<topic>-value`` (TopicNameStrategy) and frames each value with its id."""
    from confluent_kafka import Producer
    from confluent_kafka.serialization import MessageField, SerializationContext

    broker_mod.ensure_topic(bootstrap, topic, 2)
    (serializer,) = confluent_avro_serializers(registry_url, schema)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    context = SerializationContext(topic, MessageField.VALUE)
    for record in records:
        producer.produce(topic, key=str(record["order_id"]).encode(),
                         value=serializer(record, context))
    assert producer.flush(30) == 0


def produce_raw(bootstrap: str, topic: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, key=b"x", value=value)
    assert producer.flush(30) == 0


def orders(first: int, count: int, coupon: bool = False) -> list[dict[str, Any]]:
    from datetime import UTC, datetime
    from decimal import Decimal

    rows = []
    for i in range(first, first + count):
        row = {"order_id": i, "amount": Decimal(i) / 4,
               "placed_at": datetime(2026, 1, 1, tzinfo=UTC), "_ref_key": i * 10,
               "_is_deleted": False}
        if coupon:
            row["coupon"] = f"C{i}"
        rows.append(row)
    return rows


def registry_job(topic: str, **overrides: Any) -> dict[str, Any]:
    return {"topic": topic, "value_format": "confluent-avro", "row_key": ["order_id"],
            **overrides}


def test_decodes_every_version_with_its_writer_schema_by_id(
        broker: str, schema_registry: str, make_settings: Any, job_name: str) -> None:
    """Kafka and the registry only (no Spark): the driver-side half of a batch."""
    from python_ingest.changelog.decode import Decoder
    from python_ingest.changelog.schema import ChangelogSchema

    produce_avro(broker, schema_registry, job_name, V1, orders(1, 5))
    produce_avro(broker, schema_registry, job_name, V2, orders(6, 5, coupon=True))
    settings = make_settings({job_name: registry_job(job_name)},
                             schema_registry={"url": schema_registry})
    schema = ChangelogSchema.load(settings.job(job_name), settings.root)
    assert len(schema.writer_schemas) == 2 and "coupon" in dict(schema.payload)
    decoder = Decoder(schema)
    rows = []
    for p in partition_offsets(broker, job_name):
        for message in read_range("confluent-kafka", broker, job_name, p.partition, p.earliest,
                                  p.end, 30):
            rows.append(decoder.decode(message.value))
    by_id = {r["order_id"]: r for r in rows}
    assert sorted(by_id) == list(range(1, 11))
    assert by_id[3]["coupon"] is None and by_id[8]["coupon"] == "C8"
    assert str(by_id[8]["amount"]) == "2.00" and by_id[8]["_ref_key"] == 80


def test_registry_config_keeps_its_password_out_of_reprs(tmp_path: Path) -> None:
    from python_ingest.config import load_settings

    (tmp_path / "pw").write_text("s3cret\n")
    config = tmp_path / "sluice.yml"
    config.write_text(json.dumps({
        "schema_registry": {"url": "http://registry:8081", "user": "sluice",
                            "password_file": "pw"},
        "jobs": {"orders": registry_job("shop.orders")}}))
    settings = load_settings(config, env={})
    registry = settings.job("orders").registry
    assert registry is not None and registry.url == "http://registry:8081"
    assert registry.secret() == "s3cret" and "s3cret" not in repr(settings)
    env = {"SLUICE_SCHEMA_REGISTRY_URL": "http://other:8081"}
    assert load_settings(config, env=env).job("orders").registry.url == "http://other:8081"


def raw_rows(spark: Any, job: str) -> dict[int, Any]:
    from python_ingest.tables.names import JobTables

    return {r["order_id"]: r for r in spark.table(JobTables(job).raw).collect()}


def test_new_version_mid_stream_lands_and_unknown_id_is_an_error_row(
        spark: Any, broker: str, schema_registry: str, make_settings: Any,
        job_name: str) -> None:
    from python_ingest.steps.jobs import run_ingest
    from python_ingest.tables.names import JobTables

    settings = make_settings({job_name: registry_job(job_name)},
                             schema_registry={"url": schema_registry})
    job = settings.job(job_name)
    produce_avro(broker, schema_registry, job_name, V1, orders(1, 40))
    first = run_ingest(spark, settings, job)
    assert (first.read, first.landed, first.errors) == (40, 40, 0)
    assert "coupon" not in spark.table(JobTables(job_name).raw).columns

    # a producer moves to the next version mid-stream; one message names an id never registered
    produce_avro(broker, schema_registry, job_name, V2, orders(41, 30, coupon=True))
    produce_avro(broker, schema_registry, job_name, V1, orders(71, 5))
    produce_raw(broker, job_name, [b"\x00" + (987654).to_bytes(4, "big") + b"\x02\x04"])
    second = run_ingest(spark, settings, job)
    assert (second.read, second.landed, second.errors) == (36, 35, 1)
    rows = raw_rows(spark, job_name)
    assert sorted(rows) == list(range(1, 76))
    assert rows[45]["coupon"] == "C45" and rows[5]["coupon"] is None
    assert rows[72]["coupon"] is None and float(rows[72]["amount"]) == 18.0
    assert {r["_batch_id"] for r in rows.values()} == {1, 2}
    errors = spark.table(JobTables(job_name).raw_errors).collect()
    assert len(errors) == 1
    assert "unknown schema id 987654" in errors[0]["error_exception"]
    assert schema_registry in errors[0]["error_exception"]


def test_unreachable_registry_fails_the_batch_before_any_data_moves(
        spark: Any, broker: str, make_settings: Any, job_name: str) -> None:
    from python_ingest.exceptions import SchemaRegistryError
    from python_ingest.runtime.processes import free_port
    from python_ingest.steps.jobs import run_ingest
    from python_ingest.tables.formats import table_exists
    from python_ingest.tables.names import JobTables

    broker_mod.ensure_topic(broker, job_name, 1)
    produce_raw(broker, job_name, [b"\x00\x00\x00\x00\x01\x02"])
    gone = f"http://127.0.0.1:{free_port()}/apis/ccompat/v7"
    settings = make_settings({job_name: registry_job(job_name)}, schema_registry={"url": gone})
    with pytest.raises(SchemaRegistryError, match="cannot be reached") as failed:
        run_ingest(spark, settings, settings.job(job_name))
    assert gone in str(failed.value) and "schema_registry.url" in str(failed.value)
    assert not table_exists(spark, JobTables(job_name).raw)
    assert not table_exists(spark, JobTables(job_name).raw_errors)
