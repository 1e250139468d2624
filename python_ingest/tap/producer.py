"""Publishing changelog events: Confluent-framed Avro, keyed by row key, acknowledgements tracked.

Every message is ``0x00 | schema id (4 bytes, big endian) | Avro body``. The key is the row
key, so all events of one row land in one partition. Which messages the broker acknowledged is
tracked in an AckWindow: the tap saves a checkpoint only when every message before it is in.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from functools import partial
from typing import Any

import fastavro

from python_ingest.exceptions import BrokerError
from python_ingest.tap.position import AckWindow


class Encoder:
    """Encodes records of one schema version in the Confluent wire format."""

    def __init__(self, schema_id: int, schema: dict[str, Any]) -> None:
        self.schema_id = schema_id
        self.parsed = fastavro.parse_schema(schema)
        self.header = struct.pack(">bI", 0, schema_id)

    def encode(self, record: dict[str, Any]) -> bytes:
        out = io.BytesIO()
        out.write(self.header)
        fastavro.schemaless_writer(out, self.parsed, record)
        return out.getvalue()


class ChangelogProducer:
    """A Kafka producer that knows which of its messages were acknowledged."""

    def __init__(self, bootstrap: str, linger_ms: int = 5) -> None:
        import confluent_kafka as ck

        self.bootstrap = bootstrap
        self.acks = AckWindow()
        self._producer = ck.Producer({
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": linger_ms,
            "enable.idempotence": False,
            "partitioner": "murmur2_random",
            "queue.buffering.max.messages": 500_000,
            "queue.buffering.max.kbytes": 512 * 1024,
            "message.timeout.ms": 120_000,
        })
        self._callbacks: dict[int, Callable[[Any, Any], None]] = {}

    def _delivered(self, seq: int, err: Any, _msg: Any) -> None:
        self.acks.ack(seq, None if err is None else str(err))

    def send(self, topic: str, key: bytes, value: bytes) -> int:
        """Queue one message; returns its sequence number (see AckWindow)."""
        seq = self.acks.issue()
        callback = partial(self._delivered, seq)
        while True:
            try:
                self._producer.produce(topic, key=key, value=value, on_delivery=callback)
                break
            except BufferError:
                self._producer.poll(0.05)
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
        if self.acks.failures:
            raise BrokerError(f"the broker at {self.bootstrap} rejected changelog messages "
                              f"({self.acks.failures[0]}); the checkpoint stays before them, "
                              "so they are sent again on restart")
