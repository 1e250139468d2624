"""Poison input never stalls a job (issue #9.11, ingestion side): one bad value costs one error
row, and an error flood never piles up on the driver."""

from __future__ import annotations

import io
import json
import logging
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pytest
from kafka import KafkaProducer

from python_ingest.kafka import broker as broker_mod
from python_ingest.steps.jobs import run_ingest
from python_ingest.tables.checkpoints import read_checkpoint
from python_ingest.tables.names import JobTables
from python_ingest.tables.runs import last_runs
from tests.conftest import trips_job
from tests.steps.test_ingest import _end_offsets, produce, raw_state

pytestmark = [pytest.mark.e2e, pytest.mark.reliability]

DAY_MS = 86_400_000


def _schema(amount_precision: int, logical: bool) -> dict[str, Any]:
    """The job's schema (logical) or the writer's that can hold every poison value (plain)."""
    amount = {"type": "bytes", "logicalType": "decimal", "precision": amount_precision,
              "scale": 2}
    at = {"type": "long", "logicalType": "timestamp-millis"} if logical else "long"
    day = {"type": "int", "logicalType": "date"} if logical else "int"
    return {"type": "record", "name": "poison", "fields": [
        {"name": "id", "type": "bytes"},
        {"name": "amount", "type": ["null", amount], "default": None},
        {"name": "at", "type": ["null", at], "default": None},
        {"name": "day", "type": ["null", day], "default": None},
        {"name": "_ref_key", "type": "long"},
        {"name": "_event_ts", "type": ["null", "long"], "default": None},
    ]}


def _send(bootstrap: str, topic: str, messages: list[tuple[int, bytes | None, bytes]]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for partition, key, value in messages:
        producer.send(topic, key=key, value=value, partition=partition)
    producer.flush()
    producer.close()


def test_poison_values_cost_one_error_row_each_never_the_batch(
        spark: Any, broker: str, make_settings: Any, job_name: str, tmp_path: Path) -> None:
    schema_file = tmp_path / "poison.avsc"
    schema_file.write_text(json.dumps(_schema(6, logical=True)))
    writer = fastavro.parse_schema(_schema(20, logical=False))

    def encode(**fields: Any) -> bytes:
        record = {"amount": Decimal("12.34"), "at": 1_700_000_000_000, "day": 19_000,
                  "_event_ts": 1_700_000_000_000, **fields}
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, writer, record)
        return buffer.getvalue()

    good = {  # row key bytes -> the _row_key they become (lowercase hex: injective)
        b"\xff\xfe\x00": "fffe00",  # not UTF-8: failed the whole task, on every retry
        b"abc": "616263",
        b"": "\u2205",  # never empty: Hudi refuses an empty record key (changelog/keys.py)
        b"zero-day": "7a65726f2d646179",  # the tap's zero date: day -719529 lands as it is
    }
    poison = {  # row key -> (the column the error names, the bad value)
        b"amount": ("amount", {"amount": Decimal("123456.78")}),  # 8 digits, declared 6
        b"at-high": ("at", {"at": 2**62}),  # overflows microseconds
        b"at-low": ("at", {"at": -(2**62)}),  # overflows microseconds too
        b"event-ts": ("_event_ts", {"_event_ts": 2**62}),
    }
    messages = [(i % 2, key, encode(id=key, _ref_key=i + 1,
                                    **({"day": -719_529} if key == b"zero-day" else {})))
                for i, key in enumerate(good)]
    messages += [(i % 2, key, encode(id=key, _ref_key=100 + i, **values))
                 for i, (key, (_, values)) in enumerate(poison.items())]
    jobs = {name: {"topic": job_name, "schema": str(schema_file), "row_key": ["id"],
                   **extra} for name, extra in ((job_name, {}), (f"{job_name}_joined",
                                                 {"row_key_encoding": "joined"}))}
    settings = make_settings(jobs)
    broker_mod.ensure_topic(broker, job_name, 2)
    _send(broker, job_name, messages)

    result = run_ingest(spark, settings, settings.job(job_name))

    assert (result.read, result.landed, result.errors) == (8, 4, 4)
    tables = JobTables(job_name)
    raw = spark.table(tables.raw).select("_row_key", "id").collect()  # (no Python date)
    (zero_day,), = spark.sql(f"select unix_date(day) from {tables.raw} "
                             "where _row_key = '7a65726f2d646179'").collect()
    assert zero_day == -719_529
    assert sorted(r["_row_key"] for r in raw) == sorted(good.values())
    assert {bytes(r["id"]) for r in raw} == set(good)
    errors = spark.table(tables.raw_errors).collect()
    sent = {key: value for _, key, value in messages}
    assert Counter(bytes(r["_kafka_key"]) for r in errors) == Counter(list(poison))
    for row in errors:
        key = bytes(row["_kafka_key"])
        assert f"column '{poison[key][0]}'" in row["error_exception"], row["error_exception"]
        assert bytes(row["error_source_data"]) == sent[key]
    checkpoint = read_checkpoint(spark, tables.raw)
    assert checkpoint is not None and dict(checkpoint.offsets) == _end_offsets(broker, job_name)
    assert last_runs(spark, job_name, 1)[0]["outcome"] == "succeeded"

    # The old encoding (row_key_encoding: joined) keeps UTF-8 keys as text; a key that is
    # not UTF-8 cannot be text, and costs its own error row, not the run.
    joined = run_ingest(spark, settings, settings.job(f"{job_name}_joined"))
    assert (joined.read, joined.landed, joined.errors) == (8, 3, 5)
    joined_tables = JobTables(f"{job_name}_joined")
    assert sorted(r["_row_key"] for r in spark.table(joined_tables.raw).select(
        "_row_key").collect()) == ["abc", "zero-day", "\u2205"]
    not_text = [r for r in spark.table(joined_tables.raw_errors).collect()
                if bytes(r["_kafka_key"]) == b"\xff\xfe\x00"]
    assert len(not_text) == 1 and "column 'id'" in not_text[0]["error_exception"]
    assert "UTF-8" in not_text[0]["error_exception"]


def test_an_error_flood_is_bounded_on_the_driver_and_every_message_lands_once(
        spark: Any, broker: str, make_settings: Any, job_name: str,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "python_ingest.steps.ingest.land")
    budget = 40_000  # bytes of error rows the driver may hold, for the whole run
    monkeypatch.setattr("python_ingest.steps.ingest.land.error_budget_bytes", budget)
    settings = make_settings({job_name: trips_job(job_name, records_per_task=100)})
    job = settings.job(job_name)
    events = produce(broker, job.topic, 300, seed=91, malformed_rate=0.1)  # 4 partitions
    flood = [(p, None, b"\x02not avro at all" * 20) for p in (1, 2, 3) for _ in range(120)]
    flood += [(0, None, b"\x02bad") for _ in range(3)]  # a quiet unit: few, small errors
    _send(broker, job.topic, flood)
    produced = len(events) + len(flood)

    result = run_ingest(spark, settings, job)

    malformed = sum(e.kind == "malformed" for e in events) + len(flood)
    assert (result.read, result.errors) == (produced, malformed)
    refs, raw_rows, error_rows = raw_state(spark, job)  # asserts no message landed twice
    assert (raw_rows, error_rows) == (produced - malformed, malformed)
    stored = Counter(bytes(r["error_source_data"] or b"") for r in
                     spark.table(JobTables(job.name).raw_errors).collect())
    assert stored[flood[0][2]] == 360 and stored[b"\x02bad"] == 3
    # Every error row's bytes together are far beyond the budget: collecting them all (as
    # each work unit under its own budget did) would hold them on the driver at once.
    assert sum(len(value) * n for value, n in stored.items()) > 2 * budget
    assert "for their error rows" in caplog.text  # the flood was re-read by the tasks
    run = last_runs(spark, job.name, 1)[0]
    assert run["outcome"] == "succeeded"
    details = json.loads(run["details"])
    collected = details["errors_collected"]
    assert 0 < collected["rows"] < malformed  # the few of the quiet units came back...
    assert collected["bytes"] <= budget == collected["budget"]  # ...within the run's budget
    assert collected["re_read_units"] >= 3
    checkpoint = read_checkpoint(spark, JobTables(job.name).raw)
    assert checkpoint is not None and dict(checkpoint.offsets) == _end_offsets(broker, job.topic)
