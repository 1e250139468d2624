"""Demo data: DBEvents-style changelog events for a ``trips`` table.

A seeded generator yields creates, full updates, partial updates, deletes, duplicates (the
same event sent twice, as at-least-once delivery does) and a few malformed messages. It also
keeps the expected final state of the table, so tests can compare the lake with it.
"""

from __future__ import annotations

import io
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fastavro

DEMO_TOPIC = "demo.trips"
DEMO_PARTITIONS = 4
CITIES = ("Amsterdam", "Berlin", "São Paulo", "Zürich", "Lagos", "Mumbai", "Austin")
STATUSES = ("requested", "accepted", "completed", "cancelled")
MALFORMED = ("garbage", "truncated", "no_row_key", "empty")


def trips_schema(root: Path) -> dict[str, Any]:
    """The demo's Avro schema: ``root/schemas/trips.avsc``, else the one sluice ships."""
    import json

    from python_ingest.runtime.jars import repo_root

    path = root / "schemas" / "trips.avsc"
    if not path.is_file():
        path = repo_root() / "schemas" / "trips.avsc"
    parsed = fastavro.parse_schema(json.loads(path.read_text()))
    assert isinstance(parsed, dict)
    return parsed


@dataclass(frozen=True)
class Event:
    """One Kafka message: its key and value bytes, and what it means for the oracle."""

    key: bytes | None
    value: bytes | None
    kind: str  # create, update, partial, delete, duplicate, malformed, invalid, late
    record: dict[str, Any] | None = None


@dataclass
class TripsGenerator:
    """Generates changelog events and tracks the source table they describe."""

    schema: dict[str, Any]
    seed: int = 7
    first_trip_id: int = 1
    malformed_rate: float = 0.01
    duplicate_rate: float = 0.05
    invalid_rate: float = 0.0  # new trips that fail the expectation suite (never in .rows)
    history_size: int = 5_000  # recent events kept for late re-delivery (late_events)
    rng: random.Random = field(init=False)
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)
    next_trip_id: int = field(init=False)
    ref: int = field(init=False)
    history: list[Event] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.next_trip_id = self.first_trip_id
        self.ref = int(time.time() * 1000) * 1000

    def encode(self, record: dict[str, Any]) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, self.schema, record)
        return out.getvalue()

    def _envelope(self, **extra: Any) -> dict[str, Any]:
        self.ref += 1
        now = int(time.time() * 1000)
        return {"_ref_key": self.ref, "_source": "demo", "_event_ts": now,
                "_data_center": self.rng.choice(("dc1", "dc2")), "_is_deleted": False,
                "_force_update": False, "_changed_columns": None, **extra}

    def _new_row(self, trip_id: int) -> dict[str, Any]:
        rng = self.rng
        return {
            "trip_id": trip_id,
            "rider_id": rng.randint(1, 5000),
            "driver_id": rng.randint(1, 800) if rng.random() < 0.9 else None,
            "city": rng.choice(CITIES),
            "status": "requested",
            "fare": round(rng.uniform(4, 80), 2),
            "distance_km": round(rng.uniform(0.5, 40), 3),
            "requested_at": datetime.fromtimestamp(rng.randint(1_700_000_000, 1_760_000_000), UTC),
        }

    def _event(self, kind: str, record: dict[str, Any]) -> Event:
        key = str(record["trip_id"]).encode()
        return Event(key, self.encode(record), kind, record)

    def _malformed(self) -> Event:
        kind = self.rng.choice(MALFORMED)
        if kind == "garbage":
            return Event(b"garbage", bytes(self.rng.getrandbits(8) for _ in range(40)), "malformed")
        if kind == "empty":
            return Event(b"empty", None, "malformed")
        record = {**self._new_row(0), "trip_id": None, **self._envelope()}
        value = self.encode(record)
        if kind == "truncated":
            value = value[: len(value) // 2]
        return Event(b"bad", value, "malformed")

    def events(self, count: int) -> Iterator[Event]:
        """``count`` messages of mixed kinds (duplicates count as messages)."""
        rng = self.rng
        produced = 0
        last: Event | None = None
        while produced < count:
            roll = rng.random()
            if last is not None and roll < self.duplicate_rate:
                event = Event(last.key, last.value, "duplicate", last.record)
            elif roll < self.duplicate_rate + self.malformed_rate:
                event = self._malformed()
            elif roll < self.duplicate_rate + self.malformed_rate + self.invalid_rate:
                event = self._invalid()
            elif not self.rows or roll < 0.45:
                trip_id = self.next_trip_id
                self.next_trip_id += 1
                row = self._new_row(trip_id)
                self.rows[trip_id] = row
                event = self._event("create", {**row, **self._envelope()})
            else:
                trip_id = rng.choice(list(self.rows)) if len(self.rows) < 50_000 else \
                    rng.randint(self.first_trip_id, self.next_trip_id - 1)
                event = self._change(trip_id)
            produced += 1
            if event.kind != "malformed":
                last = event
            if event.kind in ("create", "update", "partial", "delete"):
                self.history.append(event)
                del self.history[:-self.history_size]
            yield event

    def changes(self, count: int) -> Iterator[Event]:
        """``count`` changes to existing rows only (updates, partial updates, deletes): a batch
        without inserts, which a merge-on-read table writes to log files."""
        for _ in range(count):
            event = self._change(self.rng.choice(list(self.rows)))
            self.history.append(event)
            del self.history[:-self.history_size]
            yield event

    def late_events(self, count: int) -> Iterator[Event]:
        """Re-deliver ``count`` earlier events (late and duplicated: older ref keys than the
        rows' current ones, so the merge must ignore them)."""
        for _ in range(min(count, len(self.history))):
            event = self.rng.choice(self.history)
            yield Event(event.key, event.value, "late", event.record)

    def _invalid(self) -> Event:
        """A new trip whose values fail the demo suite (negative fare or unknown status)."""
        trip_id = self.next_trip_id
        self.next_trip_id += 1
        row = self._new_row(trip_id)
        if self.rng.random() < 0.5:
            row["fare"] = -round(self.rng.uniform(1, 50), 2)
        else:
            row["status"] = "teleported"
        return self._event("invalid", {**row, **self._envelope()})

    def _change(self, trip_id: int) -> Event:
        rng = self.rng
        row = self.rows.get(trip_id)
        if row is None:  # deleted meanwhile: re-create it
            row = self._new_row(trip_id)
            self.rows[trip_id] = row
            return self._event("create", {**row, **self._envelope()})
        roll = rng.random()
        if roll < 0.1:
            del self.rows[trip_id]
            return self._event("delete", {**row, **self._envelope(_is_deleted=True)})
        if roll < 0.55:
            changed = {"status": rng.choice(STATUSES[1:]), "fare": round(rng.uniform(4, 80), 2)}
            row.update(changed)
            partial = {"trip_id": trip_id, **changed,
                       **self._envelope(_changed_columns=sorted(changed))}
            return self._event("partial", partial)
        row.update(status=rng.choice(STATUSES), driver_id=rng.randint(1, 800),
                   distance_km=round(rng.uniform(0.5, 40), 3))
        return self._event("update", {**row, **self._envelope()})


def produce(bootstrap: str, topic: str, events: Iterator[Event]) -> int:
    """Send events to ``topic`` (keyed, so one row's events share a partition); returns count."""
    import confluent_kafka as ck

    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                            "partitioner": "murmur2_random", "enable.idempotence": False,
                            "queue.buffering.max.messages": 1_000_000,
                            "log_level": 3})  # librdkafka's errors only (kafka/security.py)
    sent = 0
    for event in events:
        while True:
            try:
                producer.produce(topic, key=event.key, value=event.value)
                break
            except BufferError:
                producer.poll(0.1)
        sent += 1
        if sent % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(60)
    if remaining:
        from python_ingest.exceptions import BrokerError

        raise BrokerError(f"{remaining} demo messages were not acknowledged by {bootstrap}")
    return sent
