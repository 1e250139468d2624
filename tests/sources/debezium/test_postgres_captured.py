"""Debezium PostgreSQL events as the real connector wrote them (issue #58.1, .6, .8), replayed
from tests/sources/debezium/cases/ (captured by test_connect_postgres.py; pg_cases.py says
what they hold). Unit level: no Spark, no broker, no Connect.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from python_ingest.changelog import debezium
from python_ingest.exceptions import ReadError
from tests.sources.debezium import pg_cases

pytestmark = [pytest.mark.debezium, pytest.mark.reliability]


def _payloads(values: list[bytes]) -> list[dict[str, Any]]:
    return [json.loads(v)["payload"] for v in values]


def test_captured_long_transaction_and_toast_events_fold_to_the_tables() -> None:
    """The long transaction's two updates of one row (more than 1 MiB of WAL apart, both
    before the commit Debezium streamed before theirs) keep their order: the later value, as
    PostgreSQL holds; a transaction in flight at the snapshot outranks the snapshot's row;
    updates carrying the TOAST placeholder keep the other values; numeric(3,5) decodes."""
    messages, tables = pg_cases.load()
    assert tables["orders"]["1"]["v"] == "second of two"
    pg_cases.check(messages, tables)
    updates = [p for p in _payloads(messages["orders"])
               if p["op"] == "u" and p["after"]["v"].endswith("of two")]
    refs = [debezium.ref_key(p, "position") for p in updates]
    assert len(refs) == 2 and refs[0] < refs[1]


def test_captured_numeric_scale_above_precision_is_decimal_scale_scale() -> None:
    """numeric(3,5) (PostgreSQL 15): Debezium's Decimal with precision 3, scale 5 lands as
    decimal(5,5), as the tap's (fastavro refuses decimal(3,5))."""
    messages, _ = pg_cases.load()
    read = pg_cases.decoder(messages["notes"], "notes")
    assert dict(read.schema.payload)["tiny"] == "decimal(5,5)"
    assert str(read.decode(messages["notes"][0])["tiny"]) == "0.00125"
    # Avro: the AvroConverter's writer schema says precision 3, scale 5 as well
    import fastavro

    tiny = {"type": "bytes", "logicalType": "decimal", "precision": 3, "scale": 5,
            "connect.name": "org.apache.kafka.connect.data.Decimal",
            "connect.parameters": {"scale": "5", "connect.decimal.precision": "3"}}
    row = {"type": "record", "name": "Value", "connect.name": "pg.public.notes.Value",
           "fields": [{"name": "id", "type": "int"},
                      {"name": "tiny", "type": ["null", tiny], "default": None}]}
    avro, _ = debezium.flat_schema(row, "notes", "avro")
    assert next(f["type"] for f in avro["fields"] if f["name"] == "tiny")[1]["precision"] == 5
    fastavro.parse_schema(debezium.strip_logical(row))


def test_postgres_ref_keys_order_changes_far_before_the_last_commit_or_refuse() -> None:
    """Two changes of one row in one transaction, far (tens of MiB of WAL) before the commit
    streamed before theirs, keep their order; past the window the batch stops, never a tie."""
    def ref(lsn: int, last: int) -> int:
        return debezium.ref_key({"op": "u", "source": {
            "connector": "postgresql", "lsn": lsn,
            "sequence": json.dumps([str(last), str(lsn)])}}, "position")

    last = 40 << 30
    far = [ref(last - (60 << 20), last), ref(last - (60 << 20) + 24, last),
           ref(last - (1 << 20), last), ref(last, last), ref(last + 48, last)]
    assert far == sorted(set(far))
    assert ref(last + 200, last + 100) > far[-1]  # the next transaction
    with pytest.raises(ReadError, match="MiB a ref key orders exactly"):
        ref(last - (65 << 20), last)


def test_captured_toast_placeholders_are_partial_updates() -> None:
    """Debezium's ``__debezium_unavailable_value`` as it wrote it for an unchanged TOASTed
    text column and a bytea one (base64 in JSON): those columns are left out of
    ``_changed_columns`` and null; a real value in the same update is taken."""
    messages, _ = pg_cases.load()
    read = pg_cases.decoder(messages["notes"], "notes")
    rows = {(r["id"], r["n"]): r for r in map(read.decode, messages["notes"])
            if not r["_is_deleted"]}
    both = rows[(1, 2)]  # body and raw unchanged
    assert both["_changed_columns"] == ["id", "n", "tiny"]
    assert (both["body"], both["raw"]) == (None, None)
    body = rows[(2, 3)]  # raw set, body unchanged
    assert body["_changed_columns"] == ["id", "raw", "n", "tiny"]
    assert (body["body"], body["raw"]) == (None, b"\x02")
    assert rows[(1, 1)]["_changed_columns"] is None  # the snapshot's whole row
