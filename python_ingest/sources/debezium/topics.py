"""What a Debezium topic holds, for ``sluice debezium scaffold``: the row's schema and its key.

Avro topics (a Schema Registry): the newest version of ``<topic>-value`` is the change event
envelope, its ``after`` field the row; the newest of ``<topic>-key`` names the key columns.
JSON topics (Kafka Connect's JsonConverter): the first change event on the topic; with its
schema envelope (``schemas.enable=true``) the Connect schema of ``after`` becomes the row's
Avro schema, written as Confluent's AvroConverter would (``connect.name`` kept, so the
Debezium logical types land as docs/debezium.md says); its key message names the key columns.
Without schemas there is nothing to learn the column types from: the user writes the .avsc.
The row of a JSON topic is every column its sampled events carry (the first and the last
messages of each partition), in the order they appear: a column added at the source since the
first event is in it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from python_ingest.changelog import debezium
from python_ingest.changelog.debezium_json import connect_to_avro
from python_ingest.changelog.registry import RegistryClient, subject_of
from python_ingest.config import RegistryConfig
from python_ingest.exceptions import SluiceError
from python_ingest.kafka.client import partition_offsets, read_range

SAMPLE_MESSAGES = 1000  # read at most this many messages looking for a change event


@dataclass(frozen=True)
class DebeziumTopic:
    """A Debezium topic's row schema (Avro, with Debezium's connect.name annotations) and key."""

    topic: str
    row: dict[str, Any]
    key: tuple[str, ...]


def job_name(topic: str) -> str:
    """A job name for ``<prefix>.<db>.<table>``: ``<db>_<table>`` (lowercase, underscores)."""
    parts = topic.split(".")
    name = re.sub(r"[^a-z0-9_]", "_", "_".join(parts[-2:] if len(parts) > 1 else parts).lower())
    return name if name[:1].isalpha() else f"t_{name}"


def from_registry(topic: str, registry: RegistryConfig, key: Sequence[str] = ()
                  ) -> DebeziumTopic:
    """The row and key (unless given) of an Avro Debezium topic, from the registry's newest
    versions."""
    client = RegistryClient.of(registry)
    values = client.versions(subject_of(topic))
    if not values:
        raise SluiceError(f"the schema registry at {client.shown_url} has no subject "
                          f"'{subject_of(topic)}': is {topic} a Debezium topic written with "
                          "the AvroConverter?")
    row = debezium.row_schema(values[max(values)])
    if key:
        return DebeziumTopic(topic, row, tuple(key))
    keys = client.versions(f"{topic}-key")
    if not keys:
        raise SluiceError(f"the schema registry at {client.shown_url} has no subject "
                          f"'{topic}-key': give the key columns with --key")
    key = tuple(f["name"] for f in keys[max(keys)].get("fields", []))
    return DebeziumTopic(topic, row, key)


def merged_row(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One row record with every field of ``rows`` (the first's order, new fields appended):
    a newer version of a row only adds columns to what an older one lands."""
    merged = dict(rows[0])
    fields = list(merged.get("fields", []))
    names = {f["name"] for f in fields}
    for row in rows[1:]:
        for f in row.get("fields", []):
            if f["name"] not in names:
                names.add(f["name"])
                fields.append(f)
    merged["fields"] = fields
    return merged


def _ranges(bootstrap: str, topic: str) -> list[tuple[int, int, int]]:
    """(partition, start, end): the first and the last SAMPLE_MESSAGES of each partition."""
    ranges = []
    for offsets in partition_offsets(bootstrap, topic):
        head = min(offsets.end, offsets.earliest + SAMPLE_MESSAGES)
        ranges.append((offsets.partition, offsets.earliest, head))
        tail = max(head, offsets.end - SAMPLE_MESSAGES)
        if tail < offsets.end:
            ranges.append((offsets.partition, tail, offsets.end))
    return ranges


def from_messages(topic: str, bootstrap: str, key: Sequence[str] = ()) -> DebeziumTopic:
    """The row and key (unless given) of a JSON Debezium topic, from its sampled change
    events (each distinct schema once)."""
    rows: list[dict[str, Any]] = []
    seen: set[bytes] = set()
    found_key: tuple[str, ...] = tuple(key)
    for partition, start, end in _ranges(bootstrap, topic):
        for message in read_range("confluent-kafka", bootstrap, topic, partition, start, end,
                                  30.0):
            if not message.value:
                continue  # a tombstone
            at = message.value.rfind(b',"payload":')
            shape = message.value[:at] if at > 0 else message.value
            if shape in seen:
                continue
            seen.add(shape)
            value = json.loads(message.value)
            if not isinstance(value, dict) or "schema" not in value:
                raise SluiceError(f"{topic}'s JSON events carry no schema (the JsonConverter's "
                                  "schemas.enable=false): write the row's .avsc and the job "
                                  "by hand (docs/debezium.md)")
            after = next((f for f in value["schema"].get("fields", [])
                          if f.get("field") == "after"), None)
            if after is None:
                raise SluiceError(f"{topic} does not hold Debezium change events (no 'after')")
            rows.append(connect_to_avro(after))
            if not found_key:
                found = json.loads(message.key) if message.key else {}
                found = found.get("payload", found) if isinstance(found, dict) else {}
                if not found:
                    raise SluiceError(f"{topic}'s events have no key: give the key columns "
                                      "with --key")
                found_key = tuple(found)
    if not rows:
        raise SluiceError(f"no Debezium change event among the first and last "
                          f"{SAMPLE_MESSAGES} messages of each partition of {topic}")
    return DebeziumTopic(topic, merged_row(rows), found_key)
