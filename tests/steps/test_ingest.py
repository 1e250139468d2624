"""Kafka → raw Iceberg, end to end: a real Apache Kafka broker, real Spark, real Iceberg tables."""

from __future__ import annotations

import json
import logging
import signal
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient

from python_ingest.config import JobConfig
from python_ingest.demo import trips as demo
from python_ingest.exceptions import CheckpointLostError, DataLossError, OffsetResetError
from python_ingest.kafka import broker as broker_mod
from python_ingest.steps.jobs import run_ingest
from python_ingest.tables.checkpoints import read_checkpoint
from python_ingest.tables.formats import table_exists
from python_ingest.tables.names import JobTables
from python_ingest.tables.runs import last_runs
from tests.conftest import REPO, sluice_cmd, trips_job

pytestmark = pytest.mark.e2e


def raw_of(job: JobConfig) -> str:
    return JobTables(job.name).raw


def raw_errors_of(job: JobConfig) -> str:
    return JobTables(job.name).raw_errors


def produce(bootstrap: str, topic: str, count: int, seed: int = 1, first_trip_id: int = 1,
            malformed_rate: float = 0.02) -> list[demo.Event]:
    broker_mod.ensure_topic(bootstrap, topic, 4)
    gen = demo.TripsGenerator(demo.trips_schema(REPO), seed=seed, first_trip_id=first_trip_id,
                              malformed_rate=malformed_rate)
    events = list(gen.events(count))
    assert demo.produce(bootstrap, topic, iter(events)) == count
    return events


def expected_ref_keys(events: list[demo.Event]) -> Counter[int]:
    return Counter(e.record["_ref_key"] for e in events if e.kind != "malformed" and e.record)


def raw_state(spark: Any, job: Any) -> tuple[Counter[int], int, int]:
    for table in (raw_of(job), raw_errors_of(job)):  # on Hudi: name what another process made
        assert table_exists(spark, table), table
    raw = spark.table(raw_of(job))
    errors = spark.table(raw_errors_of(job))
    coords = raw.select("_kafka_partition", "_kafka_offset").union(
        errors.select("_kafka_partition", "_kafka_offset"))
    assert coords.count() == coords.distinct().count(), "a message landed twice"
    refs = Counter(r["_ref_key"] for r in raw.select("_ref_key").collect())
    return refs, raw.count(), errors.count()


@pytest.mark.parametrize("reader", ["kafka-python", "confluent-kafka"])
def test_lands_exactly_what_was_produced_then_only_new_offsets(
        spark: Any, broker: str, make_settings: Any, job_name: str, reader: str) -> None:
    settings = make_settings({job_name: trips_job(job_name, reader=reader)})
    job = settings.job(job_name)
    first = produce(broker, job.topic, 3000, seed=11)

    result = run_ingest(spark, settings, job)
    malformed = sum(e.kind == "malformed" for e in first)
    assert malformed > 0
    assert (result.read, result.landed, result.errors) == (3000, 3000 - malformed, malformed)
    refs, raw_rows, error_rows = raw_state(spark, job)
    assert (raw_rows, error_rows) == (3000 - malformed, malformed)
    assert refs == expected_ref_keys(first)
    checkpoint = read_checkpoint(spark, raw_of(job))
    ends = {p: o for p, o in _end_offsets(broker, job.topic).items()}
    assert checkpoint is not None and dict(checkpoint.offsets) == ends
    assert checkpoint.batch_id == 1

    second = produce(broker, job.topic, 500, seed=12, first_trip_id=10_000)
    result = run_ingest(spark, settings, job)
    assert result.read == 500 and result.batch_id == 2
    refs, raw_rows, error_rows = raw_state(spark, job)
    assert refs == expected_ref_keys(first) + expected_ref_keys(second)
    assert raw_rows + error_rows == 3500
    assert spark.table(raw_of(job)).where("_batch_id = 2").count() == result.landed

    again = run_ingest(spark, settings, job)
    assert again.up_to_date and again.read == 0
    runs = last_runs(spark, job.name, 3)
    assert [r["outcome"] for r in runs] == ["up-to-date", "succeeded", "succeeded"]
    assert runs[1]["counts"]["read"] == runs[1]["counts"]["landed"] + \
        runs[1]["counts"]["decode_errors"] == 500


def _end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    from python_ingest.kafka.client import partition_offsets

    return {p.partition: p.end for p in partition_offsets(bootstrap, topic)}


def test_throttled_runs_in_sequence_land_everything_once(
        spark: Any, broker: str, make_settings: Any, job_name: str) -> None:
    settings = make_settings({job_name: trips_job(job_name, max_records=700,
                                                  records_per_task=200)})
    job = settings.job(job_name)
    events = produce(broker, job.topic, 2000, seed=21)
    reads = []
    while True:
        result = run_ingest(spark, settings, job)
        if result.up_to_date:
            break
        reads.append(result.read)
        assert result.read <= 700
        assert len(result.plan.units) >= 4  # split across several Spark tasks
    assert sum(reads) == 2000 and len(reads) == 3
    refs, raw_rows, error_rows = raw_state(spark, job)
    assert raw_rows + error_rows == 2000
    assert refs == expected_ref_keys(events)


def test_max_bytes_throttles_by_estimated_message_size(
        spark: Any, broker: str, make_settings: Any, job_name: str) -> None:
    settings = make_settings({job_name: trips_job(job_name, max_bytes="40KiB")})
    job = settings.job(job_name)
    produce(broker, job.topic, 1500, seed=22, malformed_rate=0)
    first = run_ingest(spark, settings, job)
    assert 0 < first.read < 1500
    assert first.bytes <= 40 * 1024 * 1.2  # an estimate, within 20%
    total = first.read
    while not (result := run_ingest(spark, settings, job)).up_to_date:
        total += result.read
    assert total == 1500


@pytest.mark.parametrize("budget", [None, 100], ids=["collected", "re-read"])
def test_malformed_messages_land_in_the_error_table_with_reason_and_bytes(
        spark: Any, broker: str, make_settings: Any, job_name: str, budget: int | None,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "python_ingest.steps.ingest.land")
    if budget is not None:  # error rows beyond the budget are re-read instead of collected
        monkeypatch.setattr("python_ingest.steps.ingest.land.error_budget_bytes", budget)
    settings = make_settings({job_name: trips_job(job_name)})
    job = settings.job(job_name)
    events = produce(broker, job.topic, 400, seed=31, malformed_rate=0.25)
    result = run_ingest(spark, settings, job)
    bad = [e for e in events if e.kind == "malformed"]
    assert result.errors == len(bad) and result.read == result.landed + result.errors
    rows = spark.table(raw_errors_of(job)).collect()
    assert Counter(_bytes(r["error_source_data"]) for r in rows) == Counter(e.value for e in bad)
    reasons = Counter(r["error_exception"].split(":")[0] for r in rows)
    assert set(reasons) <= {"empty message value (tombstone or null)", "Avro decode failed",
                            "row key column 'trip_id' is null"} | {
        r for r in reasons if "trailing bytes" in r}
    assert all(r["_batch_id"] == 1 and r["_kafka_offset"] >= 0 for r in rows)
    assert ("for their error rows" in caplog.text) == (budget is not None)


def _bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def test_checkpoint_below_earliest_offset_is_a_hard_error_unless_accepted(
        spark: Any, broker: str, make_settings: Any, job_name: str) -> None:
    settings = make_settings({job_name: trips_job(job_name)})
    job = settings.job(job_name)
    produce(broker, job.topic, 200, seed=41, malformed_rate=0)
    run_ingest(spark, settings, job)
    produce(broker, job.topic, 400, seed=42, first_trip_id=5000, malformed_rate=0)
    checkpoint = read_checkpoint(spark, raw_of(job))
    assert checkpoint is not None
    tp = TopicPartition(job.topic, 0)
    gone_to = checkpoint.offsets[0] + 10
    admin = KafkaAdminClient(bootstrap_servers=broker)
    admin.delete_records({tp: gone_to})
    admin.close()

    with pytest.raises(DataLossError) as err:
        run_ingest(spark, settings, job)
    assert "partition 0" in str(err.value) and f"{checkpoint.offsets[0]}..{gone_to - 1}" in \
        str(err.value)
    assert read_checkpoint(spark, raw_of(job)) == checkpoint  # nothing moved
    assert last_runs(spark, job.name, 1)[0]["outcome"] == "failed"

    result = run_ingest(spark, settings, job, accept_data_loss=True)
    assert result.read == 400 - 10
    run = last_runs(spark, job.name, 1)[0]
    assert run["counts"]["lost"] == 10 and "data_loss" in run["details"]


@pytest.mark.parametrize("fault", ["before_raw_commit", "after_raw_commit",
                                   "after_error_commit"])
def test_kill_around_the_commits_then_rerun_loses_and_duplicates_nothing(
        spark: Any, broker: str, make_settings: Any, job_name: str, tmp_path: Path,
        fault: str) -> None:
    settings = make_settings({job_name: trips_job(job_name)})
    job = settings.job(job_name)
    events = produce(broker, job.topic, 1200, seed=51, malformed_rate=0.05)
    malformed = sum(e.kind == "malformed" for e in events)
    config = tmp_path / "sluice.yml"

    killed = sluice_cmd(config, "ingest", job_name, env={"SLUICE_FAULT": fault})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    raw_checkpoint = read_checkpoint(spark, raw_of(job))
    error_checkpoint = read_checkpoint(spark, raw_errors_of(job))
    raw_rows = spark.table(raw_of(job)).count()
    error_rows = spark.table(raw_errors_of(job)).count()
    if fault == "before_raw_commit":  # planned, about to read: nothing committed
        assert (raw_checkpoint, error_checkpoint, raw_rows, error_rows) == (None, None, 0, 0)
    elif fault == "after_raw_commit":  # the raw table committed, the error table did not
        assert raw_checkpoint is not None and raw_checkpoint.batch_id == 1
        assert (error_checkpoint, raw_rows, error_rows) == (None, 1200 - malformed, 0)
    else:  # both committed, with the same checkpoint (the error one knows the bytes)
        assert raw_checkpoint is not None and error_checkpoint is not None
        assert replace(error_checkpoint, bytes_per_message=None) == \
            replace(raw_checkpoint, bytes_per_message=None)
        assert (raw_rows, error_rows) == (1200 - malformed, malformed)

    more = produce(broker, job.topic, 300, seed=52, first_trip_id=9000, malformed_rate=0.05)
    # the rerun: the real CLI in this process (the kill needed a process of its own; the
    # rerun does not, and the test's session saves a JVM start)
    from python_ingest.cli import main as cli

    assert cli.main(["--config", str(config), "ingest", job_name]) == 0
    refs, raw_rows, error_rows = raw_state(spark, job)
    malformed += sum(e.kind == "malformed" for e in more)
    assert (raw_rows, error_rows) == (1500 - malformed, malformed)
    assert refs == expected_ref_keys(events) + expected_ref_keys(more)
    batches = {1} if fault == "before_raw_commit" else {1, 2}  # one batch took everything
    assert {r["_batch_id"] for r in spark.table(raw_errors_of(job)).collect()} == batches
    final = read_checkpoint(spark, raw_errors_of(job))
    assert final is not None and final.batch_id == max(batches)


@pytest.mark.reliability
@pytest.mark.parametrize(("first", "again", "match"), [
    (400, 40, "recreated"),  # far fewer offsets: its end is below the checkpoint
    # more messages than before: offsets alone would look plausible, its topic id tells
    (100, 600, "deleted and recreated .*topic id"),
], ids=["below", "refilled"])
def test_a_recreated_topic_is_a_hard_error_and_moves_nothing(
        spark: Any, broker: str, make_settings: Any, job_name: str, first: int, again: int,
        match: str) -> None:
    settings = make_settings({job_name: trips_job(job_name)})
    job = settings.job(job_name)
    produce(broker, job.topic, first, seed=61, malformed_rate=0)
    run_ingest(spark, settings, job)
    before = read_checkpoint(spark, raw_of(job))
    assert before is not None and before.topic_id
    admin = KafkaAdminClient(bootstrap_servers=broker)
    admin.delete_topics([job.topic])
    admin.close()
    produce(broker, job.topic, again, seed=62, first_trip_id=9000, malformed_rate=0)
    with pytest.raises(OffsetResetError, match=match):
        run_ingest(spark, settings, job)
    assert read_checkpoint(spark, raw_of(job)) == before
    assert spark.table(raw_of(job)).count() == first


@pytest.mark.parametrize("table_format", ["iceberg"])
def test_compaction_keeps_the_checkpoint_and_losing_it_stops_runs(
        format_spark: Any, table_format: str, broker: str, make_settings: Any,
        job_name: str) -> None:
    """Iceberg's own services (on Hudi: tests/steps/test_services.py)."""
    spark = format_spark
    settings = make_settings({job_name: trips_job(job_name, records_per_task=100)},
                             table_format=table_format)
    job = settings.job(job_name)
    produce(broker, job.topic, 600, seed=71, malformed_rate=0)
    run_ingest(spark, settings, job)
    checkpoint = read_checkpoint(spark, raw_of(job))
    spark.sql(f"call sluice.system.rewrite_data_files(table => '{raw_of(job)}', "
              "options => map('rewrite-all', 'true'))").collect()
    assert read_checkpoint(spark, raw_of(job)) == checkpoint  # walks past the rewrite
    assert run_ingest(spark, settings, job).up_to_date

    spark.sql(f"call sluice.system.expire_snapshots(table => '{raw_of(job)}', "
              "older_than => timestamp '2999-01-01 00:00:00', retain_last => 1)").collect()
    with pytest.raises(CheckpointLostError, match="expire"):
        run_ingest(spark, settings, job)
    assert spark.table(raw_of(job)).count() == 600


def test_bad_config_fails_before_any_data_moves(tmp_path: Path, broker: str) -> None:
    from tests.conftest import write_config

    config = write_config(tmp_path / "sluice.yml", tmp_path, broker,
                          {"trips": trips_job("t", max_records=-5)})
    result = sluice_cmd(config, "ingest", "trips", timeout=60)
    assert result.returncode == 2
    assert "jobs.trips.max_records" in result.stderr
    assert not (tmp_path / "warehouse").exists()


def _delete_records(bootstrap: str, topic: str, partition: int, before: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.delete_records({TopicPartition(topic, partition): before})
    finally:
        admin.close()


@pytest.mark.reliability
def test_starting_at_latest_pins_the_end_then_ingests_everything_after_it(
        spark: Any, broker: str, make_settings: Any, job_name: str) -> None:
    """#9.3: a first run at "latest" with nothing new committed no checkpoint, so every run
    started at "latest" again and nothing was ever ingested."""
    settings = make_settings({job_name: trips_job(job_name, starting_offsets="latest")})
    job = settings.job(job_name)
    produce(broker, job.topic, 50, seed=3, malformed_rate=0)  # before the job: not wanted
    first = run_ingest(spark, settings, job)
    assert first.read == 0
    pinned = read_checkpoint(spark, raw_of(job))
    assert pinned is not None and sum(pinned.offsets.values()) == 50
    assert read_checkpoint(spark, raw_errors_of(job)) == pinned

    later = produce(broker, job.topic, 30, seed=4, first_trip_id=1000, malformed_rate=0)
    second = run_ingest(spark, settings, job)
    assert second.read == 30
    refs, raw_rows, error_rows = raw_state(spark, job)
    assert (raw_rows, error_rows) == (30, 0)
    assert refs == expected_ref_keys(later)
    checkpoint = read_checkpoint(spark, raw_of(job))
    assert checkpoint is not None and sum(checkpoint.offsets.values()) == 80


@pytest.mark.reliability
@pytest.mark.parametrize(("reader", "table_format"),
                         [("kafka-python", "hudi"), ("confluent-kafka", "iceberg")])
def test_records_deleted_between_plan_and_read_are_data_loss_never_a_silent_skip(
        format_spark: Any, table_format: str, broker: str, make_settings: Any, job_name: str,
        reader: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Retention (here DeleteRecords) strikes after the run planned its ranges and before its
    tasks read them: the run fails naming the gone offsets, or, accepted, records the loss
    (and the failed run's written files stay invisible: on Hudi they belong to an instant
    older than the table's first completed commit)."""
    from python_ingest.steps.ingest import land as ingest_step

    spark = format_spark
    settings = make_settings({job_name: trips_job(job_name, reader=reader)},
                             table_format=table_format)
    job = settings.job(job_name)
    produce(broker, job.topic, 400, seed=81, malformed_rate=0)
    real_fault_point = ingest_step.fault_point
    gone: dict[int, int] = {}

    def retention_strikes(name: str) -> None:  # planned, not read yet
        if name == "before_raw_commit":
            for partition, before in gone.items():
                _delete_records(broker, job.topic, partition, before)
        real_fault_point(name)

    monkeypatch.setattr(ingest_step, "fault_point", retention_strikes)
    gone.update({0: 30})
    with pytest.raises(DataLossError, match="partition 0: the checkpoint is at offset 0 .*"
                       "earliest retained offset is 30"):
        run_ingest(spark, settings, job)
    assert read_checkpoint(spark, raw_of(job)) is None  # nothing committed

    gone.clear()
    gone.update({1: 20})  # this time the job accepts the loss: the rest lands, the loss is kept
    result = run_ingest(spark, settings, job, accept_data_loss=True)
    assert result.read == 400 - 30 - 20
    refs, raw_rows, _ = raw_state(spark, job)
    assert raw_rows == 370 - 20
    run = last_runs(spark, job.name, 1)[0]
    assert run["counts"]["lost"] == 20
    assert {"topic": job.topic, "partition": 1, "start": 0, "end": 20} in \
        json.loads(run["details"])["data_loss"]
    checkpoint = read_checkpoint(spark, raw_of(job))
    assert checkpoint is not None and sum(checkpoint.offsets.values()) == 400


@pytest.mark.parametrize("reader", ["kafka-python", "confluent-kafka"])
def test_a_compacted_topic_is_a_source_gaps_and_all(
        spark: Any, broker: str, make_settings: Any, job_name: str, reader: str) -> None:
    """Log compaction leaves gaps in the offsets: the read covers them and lands exactly the
    records the topic still holds, with the checkpoint at the end offsets. Both readers (the
    confluent-kafka reader asks for as many messages as the range's offsets span: fewer are
    there)."""
    import time

    from kafka import KafkaConsumer
    from kafka.admin import NewTopic

    from python_ingest.kafka.client import partition_offsets

    settings = make_settings({job_name: trips_job(job_name, reader=reader)})
    job = settings.job(job_name)
    admin = KafkaAdminClient(bootstrap_servers=broker)
    admin.create_topics([NewTopic(job.topic, 1, 1, topic_configs={
        "cleanup.policy": "compact", "segment.ms": "200", "min.cleanable.dirty.ratio": "0.001",
        "min.compaction.lag.ms": "0", "delete.retention.ms": "100"})])
    admin.close()
    gen = demo.TripsGenerator(demo.trips_schema(REPO), seed=95, malformed_rate=0.0,
                              duplicate_rate=0.0)
    events = list(gen.events(600))
    assert len({e.key for e in events}) < 600  # updates: compaction has something to drop

    def held() -> list[tuple[int, bytes]]:
        consumer = KafkaConsumer(bootstrap_servers=broker, enable_auto_commit=False,
                                 auto_offset_reset="earliest", consumer_timeout_ms=2000)
        consumer.assign([TopicPartition(job.topic, 0)])
        records = [(r.offset, r.value) for r in consumer]
        consumer.close()
        return records

    deadline = time.monotonic() + 90
    while True:  # produce in bursts (rolling segments) until the cleaner has compacted some
        demo.produce(broker, job.topic, iter(events[:300]))
        time.sleep(0.5)
        demo.produce(broker, job.topic, iter(events[300:]))
        time.sleep(2)
        present = held()
        end = partition_offsets(broker, job.topic)[0].end
        if len(present) < end or time.monotonic() > deadline:
            break
    assert len(present) < end, "the broker did not compact the topic within 90 s"

    result = run_ingest(spark, settings, job)
    assert result.read == len(present) and result.errors == 0
    landed = sorted(r["_kafka_offset"] for r in
                    spark.table(raw_of(job)).select("_kafka_offset").collect())
    assert landed == [offset for offset, _ in present]
    checkpoint = read_checkpoint(spark, raw_of(job))
    assert checkpoint is not None and checkpoint.offsets == {0: end}


def test_a_batch_without_error_rows_makes_no_error_commit(
        spark: Any, broker: str, make_settings: Any, job_name: str) -> None:
    """No empty commits (#34): a clean batch commits the raw table only; the settled file
    says its errors are done, and a batch with errors commits them as before."""
    from python_ingest.steps.ingest.land import _settled
    from python_ingest.tables.formats import commit_times

    settings = make_settings({job_name: trips_job(job_name)})
    job = settings.job(job_name)
    produce(broker, job.topic, 200, seed=11, malformed_rate=0.0)
    run_ingest(spark, settings, job)
    created = len(commit_times(spark, raw_errors_of(job)))
    produce(broker, job.topic, 150, seed=12, first_trip_id=5000, malformed_rate=0.0)
    run_ingest(spark, settings, job)
    raw = read_checkpoint(spark, raw_of(job))
    assert raw is not None and raw.batch_id == 2
    assert len(commit_times(spark, raw_errors_of(job))) == created  # no commit for batch 2
    settled = _settled(spark, job_name)
    assert settled is not None and (settled.batch_id, settled.offsets) == (2, raw.offsets)
    assert settled.bytes_per_message and settled.bytes_per_message > 0

    events = produce(broker, job.topic, 300, seed=13, first_trip_id=9000, malformed_rate=0.1)
    run_ingest(spark, settings, job)
    errors = read_checkpoint(spark, raw_errors_of(job))
    assert errors is not None and errors.batch_id == 3
    assert spark.table(raw_errors_of(job)).count() == sum(e.kind == "malformed" for e in events)
