"""The deletes of a table's every live row, from its topic: what a TRUNCATE (or a DROP TABLE,
or a partition detached from a tapped parent) publishes, in both taps (binlog/tap_ddl.py,
postgres/tap_tables.py; binlog/ddl.py has the binlog's DDL rules).

The tap publishes a delete for every row the table's topic says is live just before the
statement (the topic's events applied in ref-key order, as the merge does), all with the
statement's ref key. The topic must still hold the table's whole history (no message removed by
retention), else the tap cannot name the rows to delete and the table is stopped.
"""

from __future__ import annotations

import io
import struct
from typing import Any

import fastavro

from python_ingest.exceptions import BrokerError
from python_ingest.kafka import client as kafka_client
from python_ingest.sources.tap.changes import Envelope
from python_ingest.sources.tap.producer import ChangelogProducer, Encoder


def live_rows(bootstrap: str, topic: str, versions: dict[int, dict[str, Any]], before_ref: int
              ) -> tuple[dict[bytes, dict[str, Any]], str | None]:
    """The rows the topic's events leave live below ref key ``before_ref`` (Kafka key → the
    newest event's record), applied in ref-key order as the merge does; and, instead, the
    reason when the topic no longer holds the table's whole history."""
    try:
        offsets = kafka_client.partition_offsets(bootstrap, topic)
    except BrokerError as exc:
        if "does not exist" in str(exc):  # registered (--print-jobs), never published
            return {}, None
        raise  # the broker is away: the tap stops before the TRUNCATE and retries it
    gone = [po for po in offsets if po.earliest > 0]
    if gone:
        return {}, (f"the topic {topic} no longer holds the table's whole history (partition "
                    f"{gone[0].partition} begins at offset {gone[0].earliest}: retention), so "
                    "the tap cannot name the lake rows to delete. Start the table over "
                    "(docs/binlog-tap.md, \"Incompatible schema changes\")")
    parsed = {sid: fastavro.parse_schema(schema) for sid, schema in versions.items()}
    newest: dict[bytes, tuple[int, dict[str, Any]]] = {}
    for po in offsets:
        for message in kafka_client.read_range("confluent-kafka", bootstrap, topic, po.partition,
                                               po.earliest, po.end, timeout_s=60):
            if message.key is None or message.value is None or len(message.value) < 5:
                continue
            _magic, sid = struct.unpack(">bI", message.value[:5])
            if sid not in parsed:
                continue
            record = fastavro.schemaless_reader(io.BytesIO(message.value[5:]), parsed[sid], None)
            assert isinstance(record, dict)
            ref = int(record["_ref_key"])
            seen = newest.get(message.key)
            if ref < before_ref and (seen is None or ref > seen[0]):
                newest[message.key] = (ref, record)
    return {k: r for k, (_ref, r) in newest.items() if not r["_is_deleted"]}, None


def truncate(producer: ChangelogProducer, bootstrap: str, topic: str,
             versions: dict[int, dict[str, Any]], ref: int, env: Envelope) -> int | str:
    """Publish a delete (ref key ``ref``) for every row live in ``topic`` below ``ref``; the
    number published, or why the rows cannot be known (see ``live_rows``)."""
    producer.flush()  # every event published before the TRUNCATE is in the topic
    live, problem = live_rows(bootstrap, topic, versions, ref)
    if problem is not None:
        return problem
    sid = max(versions)
    encoder = Encoder(sid, versions[sid])
    fields = [f["name"] for f in versions[sid]["fields"]]
    for key, record in live.items():
        event = {f: record.get(f) for f in fields}  # the row as it was (all fields nullable)
        event.update(_ref_key=ref, _changed_columns=None, _source=env.source,
                     _event_ts=env.event_ts_ms, _is_deleted=True, _force_update=False,
                     _data_center=env.data_center)
        producer.send(topic, key, encoder.encode(event))
    return len(live)
