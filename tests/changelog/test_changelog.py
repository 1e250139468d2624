"""Decoding changelog messages: plain Avro, Confluent wire format, and each kind of bad input."""

from __future__ import annotations

import io
import json
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pytest

from python_ingest.changelog.decode import Decoder
from python_ingest.changelog.schema import ChangelogSchema
from python_ingest.config import JobConfig
from python_ingest.exceptions import ConfigError, DecodeError

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "schemas" / "trips.avsc").read_text())


def encode(record: dict[str, Any], schema: dict[str, Any] = SCHEMA) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def decoder(**job: Any) -> Decoder:
    job.setdefault("row_key", ("trip_id",))
    config = JobConfig(name="trips", topic="t", schema="schemas/trips.avsc", **job)
    return Decoder(ChangelogSchema.load(config, REPO))


def test_decodes_payload_and_envelope() -> None:
    row = decoder().decode(encode({"trip_id": 7, "city": "Zürich", "_ref_key": 99,
                                   "_changed_columns": ["city"], "_event_ts": 1_700_000_000_000,
                                   "_is_deleted": False, "_source": "mysql"}))
    assert row["trip_id"] == 7 and row["city"] == "Zürich"
    assert row["_row_key"] == "7" and row["_ref_key"] == 99
    assert row["_changed_columns"] == ["city"] and row["_source"] == "mysql"
    assert row["_event_ts"] == datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)
    assert row["_is_deleted"] is False and row["_force_update"] is False


def test_composite_row_key_with_text_is_its_json_list_or_joined_by_setting() -> None:
    value = encode({"trip_id": 7, "city": "Lagos", "_ref_key": 1})
    row = decoder(row_key=("trip_id", "city")).decode(value)
    assert row["_row_key"] == '["7", "Lagos"]'
    joined = decoder(row_key=("trip_id", "city"), row_key_encoding="joined").decode(value)
    assert joined["_row_key"] == "7|Lagos"


def test_confluent_wire_format_uses_the_writer_schema_of_the_id(tmp_path: Path) -> None:
    old = {**SCHEMA, "fields": [f for f in SCHEMA["fields"] if f["name"] != "city"]}
    (tmp_path / "old.avsc").write_text(json.dumps(old))
    dec = decoder(value_format="confluent-avro", schema_ids={3: str(tmp_path / "old.avsc")})
    body = encode({"trip_id": 5, "_ref_key": 2}, old)
    row = dec.decode(b"\x00" + (3).to_bytes(4, "big") + body)
    assert row["_row_key"] == "5" and row["city"] is None
    with pytest.raises(DecodeError, match="unknown schema id 4"):
        dec.decode(b"\x00" + (4).to_bytes(4, "big") + body)
    with pytest.raises(DecodeError, match="Confluent wire format"):
        dec.decode(body)


@pytest.mark.parametrize(("value", "reason"), [
    (None, "empty message"),
    (b"", "empty message"),
    (b"\xff" * 30, "Avro decode failed|trailing bytes"),
    (encode({"trip_id": 1, "_ref_key": 5})[:-3], "Avro decode failed|trailing bytes"),
    (encode({"trip_id": 1, "_ref_key": 5}) + b"xx", "trailing bytes"),
    (encode({"trip_id": None, "_ref_key": 5}), "row key column 'trip_id' is null"),
])
def test_bad_messages_raise_decode_error_with_the_reason(value: bytes | None, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        decoder().decode(value)


def test_schema_problems_are_config_errors(tmp_path: Path) -> None:
    bad = {**SCHEMA, "fields": SCHEMA["fields"] + [{"name": "_secret", "type": "string"}]}
    (tmp_path / "bad.avsc").write_text(json.dumps(bad))
    job = JobConfig(name="x", topic="t", schema=str(tmp_path / "bad.avsc"), row_key=("trip_id",))
    with pytest.raises(ConfigError, match="_secret"):
        ChangelogSchema.load(job, REPO)
    (tmp_path / "broken.avsc").write_text("{not json")
    job = JobConfig(name="x", topic="t", schema=str(tmp_path / "broken.avsc"), row_key=("a",))
    with pytest.raises(ConfigError, match="not a valid Avro schema"):
        ChangelogSchema.load(job, REPO)


def test_logical_types_keep_their_values(tmp_path: Path) -> None:
    schema = {"type": "record", "name": "typed", "fields": [
        {"name": "id", "type": "long"},
        {"name": "at_ms", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]},
        {"name": "at_us", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
        {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}]},
        {"name": "amount", "type": ["null", {"type": "bytes", "logicalType": "decimal",
                                             "precision": 12, "scale": 3}]},
        {"name": "blob", "type": ["null", "bytes"]},
        {"name": "_ref_key", "type": "long"},
    ]}
    (tmp_path / "typed.avsc").write_text(json.dumps(schema))
    job = JobConfig(name="typed", topic="t", schema=str(tmp_path / "typed.avsc"), row_key=("id",))
    values = {"id": 1, "at_ms": datetime(2024, 2, 29, 23, 59, 59, 123000, tzinfo=UTC),
              "at_us": datetime(1999, 12, 31, 1, 2, 3, 456789, tzinfo=UTC),
              "day": date(2020, 1, 31), "amount": Decimal("12345.678"), "blob": b"\x00\xff",
              "_ref_key": 3}
    row = Decoder(ChangelogSchema.load(job, REPO)).decode(encode(values, schema))
    assert {k: row[k] for k in values if k != "_ref_key"} == {
        k: v for k, v in values.items() if k != "_ref_key"}
    nulls = Decoder(ChangelogSchema.load(job, REPO)).decode(encode({"id": 2, "_ref_key": 4},
                                                                   schema))
    assert nulls["at_ms"] is None and nulls["amount"] is None and nulls["_event_ts"] is None


@pytest.mark.reliability
def test_arrays_of_timestamps_and_dates_keep_their_values(tmp_path: Path) -> None:
    """Found with #9.11: items of an array were decoded as plain integers but never converted,
    so a timestamp-millis landed 1000 times too early (2023 read as 1970-01-20)."""
    items = {"at_ms": "timestamp-millis", "at_us": "timestamp-micros", "days": "date"}
    schema = {"type": "record", "name": "lists", "fields": [
        {"name": "id", "type": "long"},
        *({"name": n, "type": {"type": "array", "items": {
            "type": "int" if t == "date" else "long", "logicalType": t}}}
          for n, t in items.items()),
        {"name": "_ref_key", "type": "long"},
    ]}
    (tmp_path / "lists.avsc").write_text(json.dumps(schema))
    job = JobConfig(name="lists", topic="t", schema=str(tmp_path / "lists.avsc"),
                    row_key=("id",))
    values = {"id": 1, "at_ms": [datetime(2023, 1, 1, 12, 0, 0, 123000, tzinfo=UTC)],
              "at_us": [datetime(1999, 12, 31, 1, 2, 3, 456789, tzinfo=UTC)],
              "days": [date(2020, 1, 31), date(1, 1, 1)], "_ref_key": 1}
    row = Decoder(ChangelogSchema.load(job, REPO)).decode(encode(values, schema))
    assert {k: row[k] for k in items} == {k: values[k] for k in items}


@pytest.mark.reliability
def test_a_schema_version_registered_after_the_run_started_is_read_not_an_error(
        tmp_path: Path) -> None:
    """#9.4: messages with a schema id registered after the run loaded its schemas went to
    the error table for good; the registry folder is read again once per unknown id."""
    registry = tmp_path / "registry"
    registry.mkdir()
    (registry / "1.avsc").write_text(json.dumps(SCHEMA))
    config = JobConfig(name="trips", topic="t", schema="", row_key=("trip_id",),
                       value_format="confluent-avro", schema_registry=str(registry))
    dec = Decoder(ChangelogSchema.load(config, REPO))
    older = {**SCHEMA, "fields": [f for f in SCHEMA["fields"] if f["name"] != "city"]}
    (registry / "2.avsc").write_text(json.dumps(older))  # registered while the run reads
    body = encode({"trip_id": 5, "_ref_key": 2}, older)
    row = dec.decode(b"\x00" + (2).to_bytes(4, "big") + body)
    assert row["_row_key"] == "5" and row["city"] is None
    with pytest.raises(DecodeError, match="unknown schema id 3"):
        dec.decode(b"\x00" + (3).to_bytes(4, "big") + body)
    (registry / "4.avsc").write_text("{not json")
    with pytest.raises(DecodeError, match="schema id 4: .*4.avsc is not a valid Avro schema"):
        dec.decode(b"\x00" + (4).to_bytes(4, "big") + body)
