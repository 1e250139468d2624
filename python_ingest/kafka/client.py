"""Talking to Kafka: partition offsets for the planner, and reading one offset range.

kafka-python is the default client; confluent-kafka is the faster alternative (job option
``reader: confluent-kafka``). Range reading runs inside Spark tasks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from python_ingest.exceptions import BrokerError, DataLossError, OffsetResetError, ReadError
from python_ingest.kafka import security

# Fetch sizes of the readers: large enough that a fetch returns tens of thousands of ~150 B
# records (fewer round trips), small enough to bound a task's memory (one partition per task).
PARTITION_FETCH_BYTES = 16 * 1024 * 1024
FETCH_BYTES = 64 * 1024 * 1024
READ_RETRY_BACKOFF_MS = 20  # a range reader's (kafka-python's default: 100)


@dataclass(frozen=True)
class PartitionOffsets:
    """What the broker holds for one partition: [earliest, end)."""

    partition: int
    earliest: int
    end: int


@dataclass(frozen=True)
class Message:
    key: bytes | None
    value: bytes | None
    offset: int
    timestamp_ms: int


def reading(topic: str) -> str:
    """The component that reads ``topic``, as security errors name it."""
    return f"sluice reading topic '{topic}' (a job, its planner or a report)"


# A new kafka-python client first asks the cluster which API versions it speaks (about 0.1 s
# on loopback, a round trip more over a network): the reads and offset look-ups of one process
# (a Spark task's Python worker reads unit after unit) reuse what the first client learned, for
# API_VERSION_TTL_S; a cluster upgraded or downgraded meanwhile is asked again after that
API_VERSION_TTL_S = 600.0
_api_versions: dict[str, tuple[Any, float]] = {}


def _kafka_python_consumer(bootstrap: str, topic: str, **config: Any) -> Any:
    """A kafka-python KafkaConsumer reading ``topic`` (``security.kafka_python``), with the
    cluster's API version when this process learned it within API_VERSION_TTL_S; a consumer
    that asked for it keeps its answer for the next ones."""
    from kafka import KafkaConsumer

    known = _api_versions.get(bootstrap)
    fresh = known is not None and time.monotonic() - known[1] < API_VERSION_TTL_S
    if known is not None and fresh:
        config.setdefault("api_version", known[0])
    consumer = KafkaConsumer(**security.kafka_python(bootstrap, reading(topic), **config))
    if not fresh and consumer.config.get("api_version") is not None:
        _api_versions[bootstrap] = (consumer.config["api_version"], time.monotonic())
    return consumer


def _admin_consumer(bootstrap: str, topic: str) -> Any:
    from kafka.errors import KafkaError

    try:
        return _kafka_python_consumer(bootstrap, topic, enable_auto_commit=False,
                                      request_timeout_ms=30000)
    except KafkaError as exc:
        raise BrokerError(f"cannot reach the Kafka broker at {bootstrap}: {exc}. Is it running? "
                          "For the embedded broker run 'sluice broker start'.") from exc


def partition_offsets(bootstrap: str, topic: str) -> list[PartitionOffsets]:
    """Earliest and end offsets of every partition of ``topic``."""
    from kafka import TopicPartition

    consumer = _admin_consumer(bootstrap, topic)
    try:
        partitions = consumer.partitions_for_topic(topic)
        if not partitions and security.denied(bootstrap, topic):
            raise security.failure(bootstrap, reading(topic), "topic authorization failed",
                                   action="describe and read", resource=f"topic '{topic}'")
        if not partitions:
            raise BrokerError(f"topic '{topic}' does not exist on {bootstrap}: produce to it "
                              "first (for the demo: 'sluice demo produce')")
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        earliest = consumer.beginning_offsets(tps)
        end = consumer.end_offsets(tps)
        return [PartitionOffsets(tp.partition, earliest[tp], end[tp]) for tp in tps]
    finally:
        consumer.close()


def topic_id(bootstrap: str, topic: str) -> str | None:
    """The broker's id of ``topic`` (KIP-516; changes when the topic is deleted and recreated),
    or None when the broker has none for it."""
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError

    try:
        admin = KafkaAdminClient(**security.kafka_python(bootstrap, reading(topic),
                                                         request_timeout_ms=30000))
    except KafkaError as exc:
        raise BrokerError(f"cannot reach the Kafka broker at {bootstrap}: {exc}") from exc
    try:
        described = admin.describe_topics([topic])
    finally:
        admin.close()
    found = [t for t in described if t.get("name") == topic]
    value = found[0].get("topic_id") if found else None
    return None if value is None or str(value).strip("0-") == "" else str(value)


def sample_message_bytes(bootstrap: str, topic: str, starts: dict[int, int],
                         ends: dict[int, int] | None = None, sample: int = 100) -> float | None:
    """Average key+value size of up to ``sample`` messages per partition from ``starts``
    (up to ``ends``, the partitions' end offsets when known: a partition holding fewer than
    ``sample`` past its start is not waited on for more)."""
    sizes: list[int] = []
    for partition, start in starts.items():
        stop = start + sample if ends is None else min(start + sample, ends[partition])
        for message in read_range("kafka-python", bootstrap, topic, partition, start,
                                  stop, timeout_s=10, tolerate_short=True):
            sizes.append(len(message.key or b"") + len(message.value or b""))
    return sum(sizes) / len(sizes) if sizes else None


@dataclass(frozen=True)
class MessageBatch:
    """Consecutive messages of one partition, as columns (cheaper than an object each)."""

    keys: list[bytes | None]
    values: list[bytes | None]
    offsets: list[int]
    timestamps_ms: list[int]

    def __len__(self) -> int:
        return len(self.offsets)


def read_range(reader: str, bootstrap: str, topic: str, partition: int, start: int, end: int,
               timeout_s: float, tolerate_short: bool = False) -> Iterator[Message]:
    """Yield the messages with offsets in [start, end) of one partition, in offset order."""
    for batch in read_batches(reader, bootstrap, topic, partition, start, end, timeout_s,
                              tolerate_short):
        yield from map(Message, batch.keys, batch.values, batch.offsets, batch.timestamps_ms)


# The confluent-kafka reader's group.id: librdkafka looks its coordinator up (so a secured
# cluster's ACLs must let the job's user READ it), though it never joins it or commits
CONFLUENT_GROUP = "sluice-reader"

# Called with (first lost offset, first offset after the loss) when records of a planned range
# are gone by the time it is read, and the job accepts data loss.
OnLoss = Callable[[int, int], None]


def read_batches(reader: str, bootstrap: str, topic: str, partition: int, start: int, end: int,
                 timeout_s: float, tolerate_short: bool = False,
                 on_loss: OnLoss | None = None) -> Iterator[MessageBatch]:
    """Yield the messages with offsets in [start, end) of one partition, in batches.

    Exactly the planned range or an error: records deleted by retention (or DeleteRecords)
    after the run planned its range raise DataLossError naming the gone offsets, unless
    ``on_loss`` accepts the loss (the read then continues at the earliest retained offset);
    a partition that now ends below the read position (topic recreated) raises
    OffsetResetError. Raises ReadError when the range cannot be read to its end within
    ``timeout_s`` of no progress (unless ``tolerate_short``, used for sampling).
    """
    if start >= end:
        return
    if reader == "confluent-kafka":
        yield from _read_confluent(bootstrap, topic, partition, start, end, timeout_s,
                                   tolerate_short, on_loss)
    else:
        yield from _read_kafka_python(bootstrap, topic, partition, start, end, timeout_s,
                                      tolerate_short, on_loss)


def _out_of_range(bootstrap: str, topic: str, partition: int, position: int, end: int,
                  on_loss: OnLoss | None) -> int:
    """Where to go on when the broker says ``position`` is out of range; raises if nowhere."""
    offsets = {po.partition: po for po in partition_offsets(bootstrap, topic)}
    now = offsets.get(partition)
    if now is None or now.end < position:
        raise OffsetResetError(topic, partition, position, now.end if now else 0)
    if now.earliest <= position:  # a transient answer (leader change): read on
        return position
    if on_loss is None:
        raise DataLossError(topic, partition, position, now.earliest)
    resume = min(now.earliest, end)
    on_loss(position, resume)
    return resume


def _short_read(topic: str, partition: int, position: int, end: int, timeout_s: float) -> ReadError:
    return ReadError(f"topic '{topic}' partition {partition}: no progress at offset {position} "
                     f"for {timeout_s:.0f}s while reading up to offset {end}; the broker may be "
                     "down or the range was deleted. Nothing was committed; rerun the job.")


def _read_kafka_python(bootstrap: str, topic: str, partition: int, start: int, end: int,
                       timeout_s: float, tolerate_short: bool,
                       on_loss: OnLoss | None) -> Iterator[MessageBatch]:
    from kafka import TopicPartition
    from kafka.errors import AuthorizationError, OffsetOutOfRangeError

    consumer = _kafka_python_consumer(
        bootstrap, topic, enable_auto_commit=False,
        auto_offset_reset="none",  # a gone offset is an error, not a skip
        group_id=None, fetch_max_bytes=FETCH_BYTES,
        max_partition_fetch_bytes=PARTITION_FETCH_BYTES, receive_buffer_bytes=4 * 1024 * 1024,
        # the first poll finds nothing it can fetch until the partition's leader is known,
        # and sleeps this long (100 ms by default: a small range took twice that); a failing
        # read still ends after ``timeout_s`` without progress
        retry_backoff_ms=READ_RETRY_BACKOFF_MS)
    tp = TopicPartition(topic, partition)
    try:
        consumer.assign([tp])
        consumer.seek(tp, start)
        position = start
        last_progress = time.monotonic()
        while position < end:
            try:
                records = consumer.poll(timeout_ms=500, max_records=50_000).get(tp, [])
            except OffsetOutOfRangeError:
                position = _out_of_range(bootstrap, topic, partition, position, end, on_loss)
                consumer.seek(tp, position)
                last_progress = time.monotonic()
                continue
            except AuthorizationError as exc:
                raise security.failure(bootstrap, reading(topic), str(exc), action="read",
                                       resource=f"topic '{topic}'") from None
            if records and records[-1].offset >= end:
                records = [r for r in records if r.offset < end]
                position = end
            if records:
                yield MessageBatch([r.key for r in records], [r.value for r in records],
                                   [r.offset for r in records], [r.timestamp for r in records])
                last_progress = time.monotonic()
            position = max(position, consumer.position(tp) or position)
            if not records and position < end and \
                    time.monotonic() - last_progress > timeout_s:
                if tolerate_short:
                    return
                raise _short_read(topic, partition, position, end, timeout_s)
    finally:
        consumer.close()


def _read_confluent(bootstrap: str, topic: str, partition: int, start: int, end: int,
                    timeout_s: float, tolerate_short: bool,
                    on_loss: OnLoss | None) -> Iterator[MessageBatch]:
    import confluent_kafka as ck

    consumer = ck.Consumer(security.librdkafka(bootstrap, {
        "group.id": CONFLUENT_GROUP,  # never joined, never committed: its ACL is READ
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",  # a gone offset is an error, not a skip
        "fetch.max.bytes": FETCH_BYTES,
        "max.partition.fetch.bytes": PARTITION_FETCH_BYTES,
        "receive.message.max.bytes": FETCH_BYTES + 1024 * 1024,
        "queued.max.messages.kbytes": 512 * 1024,
    }, reading(topic)))
    try:
        consumer.assign([ck.TopicPartition(topic, partition, start)])
        position = start
        last_progress = time.monotonic()
        while position < end:
            # no more than the range still holds: consume() returns at that count, not
            # after its timeout (a small range waited the whole 0.5 s)
            messages = consumer.consume(min(20_000, end - position), timeout=0.5)
            if any(m.error() is not None for m in messages):
                codes = {error.code() for m in messages if (error := m.error()) is not None}
                if ck.KafkaError._AUTO_OFFSET_RESET in codes:
                    position = _out_of_range(bootstrap, topic, partition, position, end, on_loss)
                    consumer.assign([ck.TopicPartition(topic, partition, position)])
                    last_progress = time.monotonic()
                    continue
                for m in messages:
                    error = m.error()
                    if error is not None and security.is_security(error.str()):
                        raise security.failure(bootstrap, reading(topic), error.str(),
                                               action="read", resource=f"topic '{topic}'",
                                               group=CONFLUENT_GROUP)
                    if error is not None and error.code() != ck.KafkaError._PARTITION_EOF:
                        raise ReadError(f"topic '{topic}' partition {partition}: {error.str()}")
                messages = [m for m in messages if m.error() is None]
            if messages and (messages[-1].offset() or 0) >= end:
                messages = [m for m in messages if (m.offset() or 0) < end]
                position = end
            if messages:
                offsets = [m.offset() or 0 for m in messages]
                yield MessageBatch([m.key() for m in messages], [m.value() for m in messages],
                                   offsets, [m.timestamp()[1] for m in messages])
                position = max(position, offsets[-1] + 1)
                last_progress = time.monotonic()
            elif position < end:
                # Offsets can have gaps (transaction markers): the client knows its position.
                (tp,) = consumer.position([ck.TopicPartition(topic, partition)])
                if tp.offset is not None and tp.offset > position:
                    position = min(end, tp.offset)
                if time.monotonic() - last_progress > timeout_s:
                    if tolerate_short:
                        return
                    raise _short_read(topic, partition, position, end, timeout_s)
    finally:
        consumer.close()


def max_message_bytes(bootstrap: str, topic: str, timeout_s: float = 30.0) -> int:
    """The largest record batch ``topic`` takes: its ``max.message.bytes`` (the broker's
    ``message.max.bytes`` unless the topic overrides it)."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = AdminClient(security.librdkafka(bootstrap, None, f"sluice writing topic '{topic}'"))
    try:
        configs = admin.describe_configs([resource])[resource].result(timeout_s)
    except Exception as exc:
        if security.is_security(str(exc)):
            raise security.failure(bootstrap, f"sluice writing topic '{topic}'", str(exc),
                                   action="describe the configs of",
                                   resource=f"topic '{topic}'") from None
        raise BrokerError(f"cannot read the configuration of topic {topic} from {bootstrap}: "
                          f"{exc}") from exc
    return int(configs["max.message.bytes"].value)


LEADERS_TIMEOUT_S = 30.0


def wait_for_leaders(admin: Any, topic: str, timeout_s: float = LEADERS_TIMEOUT_S) -> None:
    """Return once the broker's metadata gives every partition of ``topic`` a leader.

    Creating a topic returns before its partitions have leaders. An idempotent producer that
    sent to a partition in that moment lost its first messages there without a delivery error:
    the partition's log began at the producer's third sequence number (seen once, in the
    fidelity test's tap on a loaded machine). Producers of sluice create their topics through
    ``ensure_topic``, which waits here first; raises BrokerError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        described = [t for t in admin.describe_topics([topic]) if t.get("name") == topic]
        parts = described[0].get("partitions", []) if described else []
        if parts and all(p.get("error_code", 0) == 0 and p.get("leader_id", -1) >= 0
                         for p in parts):
            return
        if time.monotonic() > deadline:
            raise BrokerError(f"topic {topic}: not every partition has a leader after "
                              f"{timeout_s:.0f} s ({parts}); is the broker healthy?")
        time.sleep(0.05)


def ensure_topic(bootstrap: str, topic: str, partitions: int,
                 configs: Mapping[str, str] | None = None) -> None:
    """Create ``topic`` (with topic ``configs``) if missing; return once all have leaders.
    A user without the ACLs for it gets security.failure naming them."""
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import AuthorizationError, TopicAlreadyExistsError

    writing = f"sluice writing topic '{topic}' (a tap, a bootstrap or a dispersal)"
    admin = KafkaAdminClient(**security.kafka_python(bootstrap, writing))
    try:
        if topic not in admin.list_topics():
            with suppress(TopicAlreadyExistsError):
                admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs or {})])
        wait_for_leaders(admin, topic)
    except AuthorizationError as exc:
        raise security.failure(bootstrap, writing, str(exc), action="create and describe",
                               resource=f"topic '{topic}'") from None
    finally:
        admin.close()
