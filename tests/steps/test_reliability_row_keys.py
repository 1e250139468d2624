"""Row keys on the ingestion decoder: composite keys injective (issue #9.7), a raw table keyed
the old way never re-keyed silently, and an empty key lands in a Hudi lake (issue #50.2)."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import fastavro
import pytest
from kafka import KafkaProducer

from python_ingest.changelog.keys import EMPTY_KEY
from python_ingest.exceptions import RowKeyEncodingError
from python_ingest.kafka import broker as broker_mod
from python_ingest.steps.dbt import Dbt
from python_ingest.steps.jobs import run_ingest
from python_ingest.steps.pipeline import run_job
from python_ingest.tables.checkpoints import append_with_checkpoint, read_checkpoint
from python_ingest.tables.formats import read_table
from python_ingest.tables.names import JobTables
from tests.conftest import trips_job
from tests.steps.helpers import as_lake, assert_index_agrees, encode, lake_rows, schema

pytestmark = [pytest.mark.e2e, pytest.mark.reliability]

SCHEMA = {"type": "record", "name": "pair", "fields": [
    {"name": "a", "type": "string"},
    {"name": "b", "type": "string"},
    {"name": "n", "type": "long"},
    {"name": "m", "type": "int"},
    {"name": "_ref_key", "type": "long"},
]}


def _produce(bootstrap: str, topic: str, records: list[dict[str, Any]]) -> None:
    schema = fastavro.parse_schema(SCHEMA)
    broker_mod.ensure_topic(bootstrap, topic, 1)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for record in records:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, schema, record)
        producer.send(topic, value=buffer.getvalue())
    producer.flush()
    producer.close()


def _keys(spark: Any, job: str) -> list[str]:
    return sorted(r["_row_key"] for r in spark.table(JobTables(job).raw).collect())


def _settings(make_settings: Any, tmp_path: Path, jobs: dict[str, dict[str, Any]],
              **extra: Any) -> Any:
    schema = tmp_path / "pair.avsc"
    schema.write_text(json.dumps(SCHEMA))
    return make_settings({name: {"schema": str(schema), **job} for name, job in jobs.items()},
                         **extra)


def test_composite_keys_holding_the_separator_stay_distinct_rows(
        spark: Any, broker: str, make_settings: Any, job_name: str, tmp_path: Path) -> None:
    records = [{"a": "a|b", "b": "c", "n": 1, "m": 1, "_ref_key": 1},
               {"a": "a", "b": "b|c", "n": 1, "m": 12, "_ref_key": 2},
               {"a": 'q"\\', "b": "ü", "n": 11, "m": 2, "_ref_key": 3}]
    _produce(broker, job_name, records)
    numbers = f"{job_name}_numbers"
    settings = _settings(make_settings, tmp_path, {
        job_name: {"topic": job_name, "row_key": ["a", "b"]},
        numbers: {"topic": job_name, "row_key": ["n", "m"]}})

    assert run_ingest(spark, settings, settings.job(job_name)).landed == 3
    keys = _keys(spark, job_name)
    assert len(set(keys)) == 3, keys  # before: 'a|b|c' twice, one lake row for two
    assert sorted(json.loads(k) for k in keys) == sorted([r["a"], r["b"]] for r in records)
    assert keys == sorted(json.dumps([r["a"], r["b"]], ensure_ascii=False) for r in records)
    checkpoint = read_checkpoint(spark, JobTables(job_name).raw)
    assert checkpoint is not None and checkpoint.row_key_encoding == "json"
    # numbers never hold '|': their composite keys stay joined, as tables keyed them so far
    assert run_ingest(spark, settings, settings.job(numbers)).landed == 3
    assert _keys(spark, numbers) == sorted(["1|1", "1|12", "11|2"])


def test_a_raw_table_keyed_the_old_way_stops_naming_the_fix(
        format_spark: Any, table_format: str, broker: str, make_settings: Any, job_name: str,
        tmp_path: Path) -> None:
    spark = format_spark
    _produce(broker, job_name, [{"a": "x", "b": "y", "n": 1, "m": 1, "_ref_key": 1}])
    job = {"topic": job_name, "row_key": ["a", "b"]}
    legacy = _settings(make_settings, tmp_path, {job_name: {**job, "row_key_encoding": "joined"}},
                       table_format=table_format)
    assert run_ingest(spark, legacy, legacy.job(job_name)).landed == 1
    assert _keys(spark, job_name) == ["x|y"]
    raw = JobTables(job_name).raw
    # What a run before the encoding was recorded left: a checkpoint without one.
    checkpoint = read_checkpoint(spark, raw)
    assert checkpoint is not None and checkpoint.row_key_encoding == "joined"
    append_with_checkpoint(read_table(spark, raw).limit(0), raw,
                           replace(checkpoint, row_key_encoding=None))
    _produce(broker, job_name, [{"a": "x|y", "b": "", "n": 2, "m": 2, "_ref_key": 2}])

    default = _settings(make_settings, tmp_path, {job_name: job}, table_format=table_format)
    with pytest.raises(RowKeyEncodingError) as stopped:
        run_ingest(spark, default, default.job(job_name))
    message = str(stopped.value)
    assert raw in message and f"jobs.{job_name}.row_key_encoding: joined" in message
    assert "start the job over" in message
    assert _keys(spark, job_name) == ["x|y"]  # nothing read
    after = read_checkpoint(spark, raw)
    assert after is not None and after.batch_id == 1

    kept = run_ingest(spark, legacy, legacy.job(job_name))  # the fix it names
    assert kept.landed == 1 and _keys(spark, job_name) == ["x|y", "x|y|"]
    again = read_checkpoint(spark, raw)
    assert again is not None and again.row_key_encoding == "joined"


def _trip(trip_id: int, city: str, ref: int, fare: float = 10.0,
          deleted: bool = False) -> dict[str, Any]:
    return {"trip_id": trip_id, "rider_id": 7, "driver_id": 3, "city": city,
            "status": "requested", "fare": fare, "distance_km": 2.5, "_ref_key": ref,
            "_is_deleted": deleted, "_force_update": False}


@pytest.mark.parametrize("table_format", ["hudi"])
def test_an_empty_string_key_lands_in_a_hudi_lake_and_the_rows_after_it_too(
        format_spark: Any, table_format: str, broker: str, make_settings: Any, project: Any,
        job_name: str) -> None:
    """A row keyed by the empty string (issue #50.2; a PostgreSQL `text primary key` holding
    ''): Hudi refused its empty record key, so every later run of the job failed its merge
    and no row of the table reached the lake. Its key is the marker now (changelog/keys.py),
    beside ' ', the marker itself and ordinary keys; later batches (an update of it, a delete
    of ' ', new rows) land too."""
    spark = format_spark
    project(job_name)
    settings = make_settings({job_name: trips_job(job_name, row_key=["city"])},
                             table_format=table_format)
    job = settings.job(job_name)
    broker_mod.ensure_topic(broker, job.topic, 1)
    parsed = schema()

    def produce(events: list[dict[str, Any]]) -> None:
        producer = KafkaProducer(bootstrap_servers=broker, acks="all")
        for event in events:
            producer.send(job.topic, value=encode(parsed, event))
        producer.flush()
        producer.close()

    m = EMPTY_KEY
    cities = ["", " ", m, m * 2, "lagos"] + [f"city {n}" for n in range(15)]
    first = [_trip(n + 1, city, n + 1) for n, city in enumerate(cities)]
    produce(first)
    dbt = Dbt(settings)
    result = run_job(spark, settings, job, dbt=dbt)
    assert result.outcome == "succeeded", result.error  # before: HoodieKeyException
    tables = JobTables(job_name, dbt.job_models(job_name))
    assert tables.lake is not None
    keys = sorted(r[0] for r in spark.sql(f"select _row_key from {tables.lake}").collect())
    assert keys == sorted([m, " ", m * 2, m * 3, "lagos", *cities[5:]])
    expected = {e["trip_id"]: as_lake(e) for e in first}
    assert lake_rows(spark, tables.lake) == expected

    later = [_trip(1, "", 100, fare=99.5), _trip(2, " ", 101, deleted=True),
             *(_trip(100 + n, f"later {n}", 102 + n) for n in range(5))]
    produce(later)
    result = run_job(spark, settings, job, dbt=dbt)
    assert result.outcome == "succeeded", result.error
    del expected[2]
    expected[1] = as_lake(later[0])
    expected.update({e["trip_id"]: as_lake(e) for e in later[2:]})
    assert lake_rows(spark, tables.lake) == expected
    state = assert_index_agrees(spark, tables)
    assert state[m] == (100, False) and state[" "] == (101, True)
