"""Debezium PostgreSQL events as the real connector wrote them (issue #58.1, .6, .8), replayed
from tests/sources/debezium/cases/ (captured by test_connect_postgres.py; pg_cases.py says
what they hold). Unit level: no Spark, no broker, no Connect.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from python_ingest.changelog import debezium, debezium_ordering
from python_ingest.exceptions import ReadError
from tests.sources.debezium import pg_cases

pytestmark = [pytest.mark.debezium, pytest.mark.reliability]


def _payloads(values: list[bytes]) -> list[dict[str, Any]]:
    return [json.loads(v)["payload"] for v in values]


def test_captured_long_transaction_and_toast_events_fold_to_the_tables() -> None:
    """The long transaction's two updates of one row (more than 1 MiB of WAL apart, both
    more than 64 MiB before the commit Debezium streamed before theirs) keep their order: the
    later value, as PostgreSQL holds; so do two within those 64 MiB and one that far back
    against one after that commit; a transaction in flight at the snapshot outranks the
    snapshot's row; updates carrying the TOAST placeholder keep the other values;
    numeric(3,5) decodes."""
    messages, tables = pg_cases.load()
    assert tables["orders"]["1"]["v"] == "second of two"
    pg_cases.check(messages, tables)
    payloads = _payloads(messages["orders"])

    def refs(row: int) -> list[int]:
        return [debezium.ref_key(p, "position", debezium.ReadBound(check=True))
                for p in payloads if p["op"] == "u" and p["after"]["id"] == row]

    def behind(p: dict[str, Any]) -> int:  # WAL between the change and the last commit
        return int(json.loads(p["source"]["sequence"])[0]) - int(p["source"]["lsn"])

    updates = [p for p in payloads if p["op"] == "u" and p["after"]["v"].endswith("of two")]
    assert len(updates) == 2 and all(behind(p) > debezium_ordering.PG_WINDOW for p in updates)
    for row in (1, 5, 6):
        assert len(refs(row)) >= 2 and refs(row) == sorted(set(refs(row))), row


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


def _pg_event(lsn: int, last: int | None, op: str = "u") -> dict[str, Any]:
    return {"op": op, "source": {"connector": "postgresql", "lsn": lsn,
                                 "sequence": json.dumps([None if last is None else str(last),
                                                         str(lsn)])}}


def test_postgres_ref_keys_order_changes_far_before_the_last_commit() -> None:
    """#58.1: changes of one row in one transaction, far (tens or hundreds of MiB of WAL)
    before the commit streamed before theirs, keep their order, below the transaction's
    later changes and the next transaction's; never a tie. Past the 64 MiB the commit order
    holds, a change takes its own LSN: before the fix such a change stopped the batch."""
    def ref(lsn: int, last: int, bounds: debezium.ReadBound | None = None) -> int:
        return debezium.ref_key(_pg_event(lsn, last), "position", bounds)

    last = 40 << 30
    checked = debezium.ReadBound(check=True, before=0)
    changes = [last - (300 << 20), last - (300 << 20) + 24, last - (65 << 20),
               last - (60 << 20), last - (60 << 20) + 24, last - (1 << 20), last, last + 48]
    keys = [ref(lsn, last, checked) for lsn in changes]
    assert keys == sorted(set(keys))
    assert keys == [ref(lsn, last) for lsn in changes]  # the check never changes a key
    assert ref(last + 200, last + 100) > keys[-1]  # the next transaction
    # a row's change in an earlier transaction, within that one's window, ranks below
    earlier_commit = last - (300 << 20) - 64
    assert ref(earlier_commit - 4096, earlier_commit - 1024) < keys[0]
    # a snapshot read streamed before the transaction (its bound at most the change's own)
    read = debezium.ref_key(_pg_event(last - (400 << 20), last - (400 << 20), "r"), "position")
    assert read < keys[0]


def test_postgres_far_change_after_a_snapshot_read_streamed_while_open_stops() -> None:
    """#58.1: an incremental (or blocking) snapshot's read of the row, streamed while the
    long transaction was open, ranks above the change's own LSN: the batch stops naming it
    rather than keep the read's stale row. The read may be earlier in the unit or before
    it (the driver's bound); a read streamed after the transaction's commit (this message
    is a copy Debezium sent again) does not stop it; an unknown bound asks the driver."""
    last, far = 40 << 30, (40 << 30) - (200 << 20)
    read_at = far + (10 << 20)  # the read's last commit: after the change, before `last`
    read = _pg_event(read_at + 64, read_at, "r")
    within = debezium.ReadBound(check=True, before=0)
    debezium.ref_key(read, "position", within)
    assert within.seen == read_at // 16 + 1
    with pytest.raises(ReadError, match="snapshot read .* was streamed while its transaction"):
        debezium.ref_key(_pg_event(far, last), "position", within)
    with pytest.raises(ReadError, match="streamed while its transaction was open"):
        debezium.ref_key(_pg_event(far, last), "position",
                         debezium.ReadBound(check=True, before=within.seen))
    copy = debezium.ReadBound(check=True, before=(last + (1 << 20)) // 16 + 1)
    assert debezium.ref_key(_pg_event(far, last), "position", copy) == ((far // 16 + 1) << 22) | 1
    unknown = debezium.ReadBound(check=True, before=None)
    with pytest.raises(ReadError, match=debezium.UNCHECKED):
        debezium.ref_key(_pg_event(far, last), "position", unknown)
    resolved = debezium.ReadBound(check=True, before=None, resolve=lambda: 0)
    assert debezium.ref_key(_pg_event(far, last), "position", resolved) \
        == ((far // 16 + 1) << 22) | 1


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


def test_captured_incremental_snapshot_reads_rank_at_their_last_commit() -> None:
    """#58.1, found on the real connector: an incremental snapshot's reads carry no
    ``source.lsn``, only ``source.sequence``, and took the fallback, the change's time in
    microseconds (about 1.8e15, above every PostgreSQL key below some 6 GiB of WAL): every
    later change of such a row ranked below its read and the lake kept the read's values.
    They rank at the commit streamed before them now, below every change streamed after;
    and the change open at the read, written more than 64 MiB before the commit streamed
    before its transaction's, stops the batch rather than rank below the read."""
    messages, _ = pg_cases.load()
    payloads = _payloads(messages["ledger"])
    reads = [p for p in payloads if p["source"]["snapshot"] == "incremental"]
    assert len(reads) == 2 and all(p["source"]["lsn"] is None for p in reads)
    last = int(json.loads(reads[0]["source"]["sequence"])[0])
    keys = {debezium.ref_key(p, "position") for p in reads}
    assert keys == {(last // 16 + 1) << 22}
    assert debezium.ref_key(_pg_event(last + 64, last), "position") > max(keys)
    assert debezium.ref_key(_pg_event(last + 64, last + 32), "position") > max(keys)
    initial = [p for p in payloads if p["op"] == "r"
               and json.loads(p["source"]["sequence"])[0] is None]
    assert initial and {debezium.ref_key(p, "position") for p in initial} == {0}
    change = next(p for p in payloads if p["op"] == "u")
    bound = debezium.ReadBound(check=True)
    for p in payloads[:payloads.index(change)]:
        debezium.ref_key(p, "position", bound)
    with pytest.raises(ReadError, match="streamed while its transaction was open"):
        debezium.ref_key(change, "position", bound)
