"""#35.9: a producer's first messages to a topic created a moment before.

Once, on a loaded machine, the tap's first inserts into a new table never reached their
partition (the log began at the idempotent producer's third sequence number) and no delivery
failed. This is the targeted test: many new tables at once, the way the tap meets them (create
the topic through ``ensure_topic``, send at once through the tap's idempotent
``ChangelogProducer``, several messages per partition so the first sequence numbers are all
in play), with the machine's cores kept busy, repeated over rounds; then every partition is
read back from its first offset and every message counted, first ones by name.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from python_ingest.kafka.broker import ensure_topic
from python_ingest.sources.tap.producer import ChangelogProducer

pytestmark = [pytest.mark.e2e, pytest.mark.reliability]

ROUNDS = 4
TOPICS = 40  # per round: new tables met at once
PARTITIONS = 4
PER_PARTITION = 3  # the loss seen began at the producer's third sequence number


@pytest.fixture
def busy_cores() -> Iterator[None]:
    """Every core kept busy while the test runs (the loss was seen under load): separate
    processes (not forks of this one, whose JVM gateway a forked child must not touch)."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
               for _ in range(os.cpu_count() or 2)]
    try:
        yield
    finally:
        for p in burners:
            p.kill()
            p.wait(timeout=10)


def _key_for(partition: int, partitions: int, n: int) -> bytes:
    """A key that murmur2 places on ``partition`` (the producer's partitioner), found by
    trying: every partition gets its messages by key, as the tap's rows do."""
    from kafka.partitioner.default import murmur2

    i = 0
    while True:
        key = f"row-{partition}-{n}-{i}".encode()
        if (murmur2(key) & 0x7FFFFFFF) % partitions == partition:
            return key
        i += 1


def _read_all(bootstrap: str, topics: list[str]) -> dict[tuple[str, int], list[bytes]]:
    """Every message of ``topics``, per partition, from its first offset (which must be 0)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        parts = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
        consumer.assign(parts)
        first = consumer.beginning_offsets(parts)
        end = consumer.end_offsets(parts)
        late = {f"{tp.topic}[{tp.partition}]": o for tp, o in first.items() if o != 0}
        assert not late, f"logs that begin past offset 0: {late}"
        consumer.seek_to_beginning(*parts)
        got: dict[tuple[str, int], list[bytes]] = {(t, p): [] for t in topics
                                                   for p in range(PARTITIONS)}
        deadline = time.monotonic() + 60
        while sum(len(v) for v in got.values()) < sum(end.values()) \
                and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=500).items():
                got[(tp.topic, tp.partition)] += [r.value for r in records]
        return got
    finally:
        consumer.close()


def test_the_first_messages_of_many_new_topics_all_arrive_under_load(
        broker: str, busy_cores: None) -> None:
    keys = {(p, n): _key_for(p, PARTITIONS, n) for p in range(PARTITIONS)
            for n in range(PER_PARTITION)}
    missing: list[str] = []
    sent = 0
    for round_ in range(ROUNDS):
        topics = [f"first-messages.r{round_}.t{t}" for t in range(TOPICS)]
        producer = ChangelogProducer(broker)  # one producer, as the tap has

        def meet(topic: str) -> None:
            ensure_topic(broker, topic, PARTITIONS)

        # the tap meets its tables one after another on its own thread, but a fleet of taps
        # (or a bootstrap) creates many at once: both at once here
        with ThreadPoolExecutor(max_workers=8) as pool:
            for topic, _ in zip(topics, pool.map(meet, topics), strict=True):
                for n in range(PER_PARTITION):  # sent as soon as the topic is there
                    for p in range(PARTITIONS):
                        producer.send(topic, keys[(p, n)], f"{topic}/{p}/{n}".encode())
                        sent += 1
                producer.poll()
        producer.flush()
        assert producer.acks.failures == []
        got = _read_all(broker, topics)
        for topic in topics:
            for p in range(PARTITIONS):
                want = [f"{topic}/{p}/{n}".encode() for n in range(PER_PARTITION)]
                if got[(topic, p)] != want:
                    missing.append(f"{topic}[{p}]: {got[(topic, p)]} (want {want})")
    assert sent == ROUNDS * TOPICS * PARTITIONS * PER_PARTITION
    assert not missing, (f"{len(missing)} of {ROUNDS * TOPICS * PARTITIONS} new partitions "
                         "did not hold their first messages in order:\n" + "\n".join(missing))
