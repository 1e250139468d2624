"""Publishing changelog events: Confluent-framed Avro, keyed by row key, acknowledgements tracked.

Every message is ``0x00 | schema id (4 bytes, big endian) | Avro body``. The key is the row
key, so all events of one row land in one partition. Which messages the broker acknowledged is
tracked in an AckWindow: the tap saves a checkpoint only when every message before it is in.
"""

from __future__ import annotations

import io
import struct
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import partial
from typing import Any

import fastavro

from python_ingest.exceptions import BrokerError, MessageTooLargeError
from python_ingest.kafka import security
from python_ingest.sources.tap.checkpoints import AckWindow

_EPOCH = datetime(1970, 1, 1)
_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)


def decimal_bytes(value: Decimal, scale: int) -> bytes:
    """Avro's decimal encoding (two's complement of the unscaled value, big endian)."""
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    shift = exponent + scale
    if shift < 0:
        raise ValueError(f"{value} has more than {scale} decimal places")
    unscaled = int("".join(map(str, digits)) or "0") * 10**shift
    if sign:
        unscaled = -unscaled
    return unscaled.to_bytes((unscaled.bit_length() + 8) // 8, "big", signed=True)


def _micros(value: datetime) -> int:
    """timestamp-micros of a datetime; naive ones are UTC (as fastavro reads them)."""
    return (value - (_EPOCH if value.tzinfo is None else _EPOCH_UTC)) // _MICRO


class Encoder:
    """Encodes records of one schema version in the Confluent wire format.

    Decimal and timestamp values are turned into their Avro representation here, which is
    several times faster than fastavro's own logical-type conversion.
    """

    def __init__(self, schema_id: int, schema: dict[str, Any]) -> None:
        self.schema_id = schema_id
        self.parsed = fastavro.parse_schema(schema)
        self.header = struct.pack(">bI", 0, schema_id)
        self.fields = {f["name"]: f for f in schema["fields"]}
        self._single: dict[str, Any] = {}
        self.decimals: list[tuple[str, int]] = []
        self.timestamps: list[str] = []
        for f in schema["fields"]:
            branch = f["type"][1] if isinstance(f["type"], list) else f["type"]
            if isinstance(branch, dict) and branch.get("logicalType") == "decimal":
                self.decimals.append((f["name"], int(branch.get("scale", 0))))
            elif isinstance(branch, dict) and branch.get("logicalType") == "timestamp-micros":
                self.timestamps.append(f["name"])

    def encode(self, record: dict[str, Any]) -> bytes:
        """Encode ``record`` (its decimal and timestamp values are replaced in place)."""
        for name, scale in self.decimals:
            value = record.get(name)
            if isinstance(value, Decimal):
                record[name] = decimal_bytes(value, scale)
        for name in self.timestamps:
            value = record.get(name)
            if isinstance(value, datetime):
                record[name] = _micros(value)
        out = io.BytesIO()
        out.write(self.header)
        fastavro.schemaless_writer(out, self.parsed, record)
        return out.getvalue()

    def failing_fields(self, record: dict[str, Any]) -> list[tuple[str, str]]:
        """The fields of ``record`` whose values this schema cannot encode, and why."""
        failing = []
        for name, value in record.items():
            field = self.fields.get(name)
            if field is None or value is None:
                continue
            if name not in self._single:
                self._single[name] = (fastavro.parse_schema(
                    {"type": "record", "name": "one", "fields": [field]}),
                    Encoder(0, {"type": "record", "name": "one", "fields": [field]})
                    if name in dict(self.decimals) or name in self.timestamps else None)
            parsed, converter = self._single[name]
            one = {name: value}
            try:
                if converter is not None:
                    converter.encode(one)
                else:
                    fastavro.schemaless_writer(io.BytesIO(), parsed, one)
            except Exception as exc:
                failing.append((name, f"{type(exc).__name__}: {exc}"))
        return failing


TAP = "the tap (its changelog producer)"  # the component security errors name


class ChangelogProducer:
    """A Kafka producer that knows which of its messages were acknowledged."""

    def __init__(self, bootstrap: str, linger_ms: int = 5,
                 config: dict[str, Any] | None = None) -> None:
        import confluent_kafka as ck

        self.bootstrap = bootstrap
        self.acks = AckWindow()
        self._kafka_exception = ck.KafkaException
        self._too_large = ck.KafkaError.MSG_SIZE_TOO_LARGE
        self._producer = ck.Producer(security.librdkafka(bootstrap, {
            "acks": "all",
            "linger.ms": linger_ms,
            "enable.idempotence": True,  # a retried send is never written twice
            "partitioner": "murmur2_random",
            "queue.buffering.max.messages": 500_000,
            "queue.buffering.max.kbytes": 512 * 1024,
            "message.timeout.ms": 120_000,
            **(config or {}),
        }, TAP))

    def _delivered(self, seq: int, err: Any, _msg: Any) -> None:
        self.acks.ack(seq, None if err is None else str(err))

    def send(self, topic: str, key: bytes, value: bytes) -> int:
        """Queue one message; returns its sequence number (see AckWindow). A message the client
        refuses as too large raises MessageTooLargeError (nothing is queued, nothing waits for
        its acknowledgement), for the caller to report that one change."""
        seq = self.acks.issue()
        callback = partial(self._delivered, seq)
        while True:
            try:
                self._producer.produce(topic, key=key, value=value, on_delivery=callback)
                break
            except BufferError:
                self._producer.poll(0.05)
            except self._kafka_exception as exc:
                if exc.args[0].code() != self._too_large:
                    raise
                self.acks.ack(seq)  # never sent: not in flight either
                raise MessageTooLargeError(
                    f"the Kafka client refuses a message of {len(key) + len(value)} bytes (key "
                    f"and value) for {topic}: {exc.args[0].str()}") from exc
        return seq

    def poll(self) -> None:
        """Serve delivery reports; raises BrokerError if a message was not delivered."""
        self._producer.poll(0)
        self._raise_failures()

    def flush(self, timeout_s: float = 60.0) -> None:
        """Wait until every queued message is acknowledged (or raise BrokerError)."""
        remaining = self._producer.flush(timeout_s)
        self._raise_failures()
        if remaining:
            raise BrokerError(f"{remaining} changelog messages were not acknowledged by "
                              f"{self.bootstrap} within {timeout_s:.0f}s; the checkpoint stays "
                              "before them, so they are sent again on restart")

    def _raise_failures(self) -> None:
        if self.acks.failures and security.is_security(self.acks.failures[0]):
            raise security.failure(self.bootstrap, TAP, self.acks.failures[0],
                                   action="write", resource="its changelog topics")
        if self.acks.failures:
            raise BrokerError(f"the broker at {self.bootstrap} rejected changelog messages "
                              f"({self.acks.failures[0]}); the checkpoint stays before them, "
                              "so they are sent again on restart")


class BarrierProducer(ChangelogProducer):
    """A producer whose acknowledgements are taken by barrier, not message by message.

    The client reports only failed deliveries (``delivery.report.only.error``, which
    confluent-kafka implements itself: a delivered message costs no Python call and no Python
    object, and its state is freed). ``flush`` is the barrier: once it
    returns without a failure, every message queued before it is in the broker, which is what
    a checkpoint needs (the PostgreSQL tap saves one after a flush). ``acks`` is not kept:
    ``send`` returns -1.
    """

    def __init__(self, bootstrap: str, linger_ms: int = 50) -> None:
        # a longer linger than ChangelogProducer's: fewer, larger batches, and far fewer
        # wake-ups of the client's thread per message (the barrier sends what waits at once)
        super().__init__(bootstrap, linger_ms, {"delivery.report.only.error": True,
                                                "on_delivery": self._failed})
        self.produce = self._producer.produce  # (topic, value, key): the tap's hot path

    def _failed(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.acks.failures.append(str(err))

    def send(self, topic: str, key: bytes, value: bytes) -> int:
        """Queue one message (as ChangelogProducer.send, without tracking it)."""
        while True:
            try:
                self._producer.produce(topic, value, key)
                return -1
            except BufferError:
                self._producer.poll(0.05)
            except self._kafka_exception as exc:
                if exc.args[0].code() != self._too_large:
                    raise
                raise MessageTooLargeError(
                    f"the Kafka client refuses a message of {len(key) + len(value)} bytes (key "
                    f"and value) for {topic}: {exc.args[0].str()}") from exc

    def flush(self, timeout_s: float = 130.0) -> None:
        """The barrier: wait until every queued message is acknowledged, or raise BrokerError.
        The client fails a message it could not deliver in ``message.timeout.ms`` (120 s), so
        a broker that is down stops the tap then, as it stops ChangelogProducer's users."""
        super().flush(timeout_s)

    def serve(self) -> None:
        """Serve the client's delivery reports (nothing in Python for delivered messages): the
        client keeps a delivered message until its report is served."""
        self._producer.poll(0)

    def queued(self) -> int:
        """Messages not yet acknowledged (or failed) by the broker."""
        return len(self._producer)
