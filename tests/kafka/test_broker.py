"""The embedded Apache Kafka broker: a real JVM from the pinned jars, one per module."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from python_ingest.config import BrokerConfig, Settings
from python_ingest.exceptions import BrokerError
from python_ingest.kafka import broker
from python_ingest.kafka.broker import EmbeddedBroker, start_embedded
from python_ingest.runtime import jars

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parent.parent.parent
STATE_DIR = REPO / ".sluice"  # where `make setup` resolved the pinned jars


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    data_dir = tmp_path_factory.mktemp("kafka") / "broker"
    handle = start_embedded(data_dir, "127.0.0.1", free_port(), heap="256m")
    yield handle
    handle.stop()  # stops whichever broker runs on the data dir by then


def settings_for(handle: EmbeddedBroker, embedded: bool = True) -> Settings:
    return Settings(root=handle.data_dir.parent, state_dir=str(STATE_DIR),
                    broker=BrokerConfig(bootstrap_servers=handle.bootstrap, embedded=embedded,
                                        data_dir=str(handle.data_dir)))


def produce(bootstrap: str, topic: str, records: list[tuple[int, bytes]]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for partition, value in records:
        producer.send(topic, value, key=value, partition=partition)
    producer.flush()
    producer.close()


def read_all(consumer: KafkaConsumer, expected: int) -> list[tuple[int, int, bytes]]:
    got: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + 20
    while len(got) < expected and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=500).values():
            got += [(r.partition, r.offset, r.value) for r in batch]
    return sorted(got)


def test_produce_and_consume_with_exact_offsets(embedded: EmbeddedBroker) -> None:
    broker.ensure_topic(embedded.bootstrap, "orders", 2)
    broker.ensure_topic(embedded.bootstrap, "orders", 2)  # idempotent
    produce(embedded.bootstrap, "orders",
            [(0, b"a0"), (1, b"b0"), (0, b"a1"), (0, b"a2"), (1, b"b1"), (0, b"a3"), (0, b"a4"),
             (1, b"b2")])
    consumer = KafkaConsumer(bootstrap_servers=embedded.bootstrap, enable_auto_commit=False)
    tps = [TopicPartition("orders", 0), TopicPartition("orders", 1)]
    assert consumer.beginning_offsets(tps) == {tps[0]: 0, tps[1]: 0}
    assert consumer.end_offsets(tps) == {tps[0]: 5, tps[1]: 3}
    consumer.assign(tps)
    consumer.seek_to_beginning()
    assert read_all(consumer, 8) == [*[(0, i, b"a%d" % i) for i in range(5)],
                                     *[(1, i, b"b%d" % i) for i in range(3)]]
    consumer.close()


def test_delete_records_and_retention_move_the_earliest_offset(
        embedded: EmbeddedBroker) -> None:
    admin = KafkaAdminClient(bootstrap_servers=embedded.bootstrap)
    admin.create_topics([NewTopic("trimmed", 1, 1),
                         NewTopic("expiring", 1, 1, topic_configs={"retention.ms": "500"})])
    produce(embedded.bootstrap, "trimmed", [(0, b"t%d" % i) for i in range(10)])
    produce(embedded.bootstrap, "expiring", [(0, b"e%d" % i) for i in range(3)])
    trimmed, expiring = TopicPartition("trimmed", 0), TopicPartition("expiring", 0)
    admin.delete_records({trimmed: 4})
    admin.close()

    consumer = KafkaConsumer(bootstrap_servers=embedded.bootstrap, enable_auto_commit=False)
    assert consumer.beginning_offsets([trimmed]) == {trimmed: 4}
    assert consumer.end_offsets([trimmed]) == {trimmed: 10}
    consumer.assign([trimmed])
    consumer.seek_to_beginning()
    assert [offset for _, offset, _ in read_all(consumer, 6)] == list(range(4, 10))
    # the broker's retention check runs every 5 s: a tiny retention.ms acts within seconds
    deadline = time.monotonic() + 30
    while consumer.beginning_offsets([expiring])[expiring] < 3:
        assert time.monotonic() < deadline, "retention.ms did not delete the records"
        time.sleep(0.5)
    assert consumer.end_offsets([expiring]) == {expiring: 3}
    consumer.close()


def test_settings_api_start_status_and_unmanaged(embedded: EmbeddedBroker) -> None:
    settings = settings_for(embedded)
    assert broker.is_up(embedded.bootstrap)
    assert broker.start(settings) is False  # already running
    status = broker.status(settings)
    kafka_version = next(c.split(":")[2] for c in jars.pinned(jars.pom_path(REPO, "kafka"))
                         if c.startswith("org.apache.kafka:kafka_"))
    assert status == broker.BrokerStatus(running=True, pid=embedded.pid,
                                         bootstrap=embedded.bootstrap,
                                         data_dir=embedded.data_dir, version=kafka_version)
    with pytest.raises(BrokerError, match="embedded is false"):
        broker.start(settings_for(embedded, embedded=False))
    with pytest.raises(BrokerError, match="already runs"):
        start_embedded(embedded.data_dir, "127.0.0.1", free_port())


def test_restart_keeps_the_data_and_handles_a_stale_pid_file(embedded: EmbeddedBroker) -> None:
    produce(embedded.bootstrap, "durable", [(0, b"d%d" % i) for i in range(4)])
    settings = settings_for(embedded)
    assert broker.stop(settings) is True
    assert not broker.is_up(embedded.bootstrap)
    assert not embedded.is_running()
    assert broker.status(settings).running is False
    assert not (embedded.data_dir / "broker.pid").exists()
    assert broker.stop(settings) is False

    dead = subprocess.Popen(["true"])
    dead.wait()
    (embedded.data_dir / "broker.pid").write_text(f"{dead.pid}\n")
    assert broker.status(settings).running is False  # the stale pid is not taken for a broker

    started = time.monotonic()
    assert broker.start(settings) is True
    restart_s = time.monotonic() - started
    status = broker.status(settings)
    assert status.running and status.pid != embedded.pid and status.pid != dead.pid
    assert int((embedded.data_dir / "broker.pid").read_text()) == status.pid
    assert os.getpgid(status.pid) == status.pid  # detached: a session of its own

    consumer = KafkaConsumer(bootstrap_servers=embedded.bootstrap, enable_auto_commit=False)
    durable = TopicPartition("durable", 0)
    assert consumer.end_offsets([durable]) == {durable: 4}
    consumer.assign([durable])
    consumer.seek_to_beginning()
    assert [v for _, _, v in read_all(consumer, 4)] == [b"d%d" % i for i in range(4)]
    consumer.close()
    assert restart_s < 30, f"restart took {restart_s:.1f}s"
