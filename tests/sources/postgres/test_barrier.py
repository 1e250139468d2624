"""The PostgreSQL tap's producer (tap/producer.py BarrierProducer): acknowledgements by
barrier, failed deliveries only reported, against the session's real broker."""

from __future__ import annotations

import pytest

from python_ingest.exceptions import BrokerError
from python_ingest.kafka import broker as broker_mod
from python_ingest.sources.tap.producer import BarrierProducer

pytestmark = pytest.mark.postgres_source


def test_the_barrier_passes_once_all_is_acked_and_raises_on_a_failed_delivery(broker) -> None:
    from confluent_kafka import Consumer, TopicPartition

    broker_mod.ensure_topic(broker, "barrier.ok", 2)
    broker_mod.ensure_topic(broker, "barrier.small", 1, {"max.message.bytes": "2000"})
    producer = BarrierProducer(broker)
    for n in range(5000):
        producer.produce("barrier.ok", b"v%d" % n, b"k%d" % n)
    producer.flush()  # the barrier: every message acknowledged
    assert producer.queued() == 0 and not producer.acks.failures
    consumer = Consumer({"bootstrap.servers": broker, "group.id": "barrier-test"})
    ends = [consumer.get_watermark_offsets(TopicPartition("barrier.ok", p))[1] for p in (0, 1)]
    consumer.close()
    assert sum(ends) == 5000
    # the broker refuses a message larger than the topic takes (the client's limit is
    # larger): its delivery fails, and the barrier says so instead of passing
    producer.produce("barrier.small", b"x" * 5000, b"big")
    with pytest.raises(BrokerError, match="rejected changelog messages"):
        producer.flush()
