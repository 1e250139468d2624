"""Debezium events as the real producers write them (issue #50): JsonConverter's type names and
base64 values decoded by the schema, a column added at the source, PostgreSQL's unchanged
TOAST placeholder, ordering across a MySQL failover and across a PostgreSQL snapshot, pre-1970
zoned timestamps, and a Schema Registry's 404 that is not believed forever. Unit level: no
Spark, no broker.
"""

from __future__ import annotations

import base64
import calendar
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from python_ingest.changelog import debezium
from python_ingest.exceptions import ReadError
from tests.sources.debezium import events as ev

pytestmark = [pytest.mark.debezium, pytest.mark.reliability]
PREFIX = "dbz"


def connect_row(fields: list[tuple[str, str, str | None, dict[str, str]]]) -> dict[str, Any]:
    """A row's Connect schema as the JsonConverter writes it (``after``'s type)."""
    return {"type": "struct", "optional": True, "name": f"{PREFIX}.shop.t.Value",
            "field": "after",
            "fields": [ev.connect_field(n, k, lg, p, optional=n != "id")
                       for n, k, lg, p in fields]}


def json_message(row_schema: dict[str, Any], op: str, after: dict[str, Any] | None,
                 source: dict[str, Any], before: dict[str, Any] | None = None) -> bytes:
    """A JsonConverter message (``schemas.enable=true``) of one change event."""
    schema = {"type": "struct", "optional": False, "name": f"{PREFIX}.shop.t.Envelope",
              "fields": [{**row_schema, "field": "before"}, {**row_schema, "field": "after"},
                         {"type": "struct", "optional": False, "field": "source",
                          "fields": []},
                         {"type": "string", "optional": False, "field": "op"}]}
    payload = {"before": before, "after": after, "source": source, "op": op, "ts_ms": 1}
    return json.dumps({"schema": schema, "payload": payload}, separators=(",", ":")).encode()


def json_decoder(make_settings: Any, tmp_path: Path, row: dict[str, Any],
                 **job: Any) -> Any:
    """The Decoder of a ``value_format: json`` Debezium job reading ``row`` (Avro)."""
    from python_ingest.changelog.decode import Decoder
    from python_ingest.changelog.schema import ChangelogSchema

    (tmp_path / "row.avsc").write_text(json.dumps(row))
    settings = make_settings({"j": {"source": "debezium", "topic": "t", "value_format": "json",
                                    "schema": str(tmp_path / "row.avsc"), "row_key": ["id"],
                                    **job}})
    return Decoder(ChangelogSchema.load(settings.job("j"), settings.root))


def binlog(pos: int) -> dict[str, Any]:
    return {"connector": "mariadb", "file": "bin.000002", "pos": pos, "row": 0, "ts_ms": 1}


def test_json_float_and_double_columns_are_scaffolded() -> None:
    """JsonConverter names FLOAT and DOUBLE columns ``float`` and ``double`` (Kafka's
    JsonSchema), not Connect's ``float32``/``float64``: the scaffold must read both."""
    from python_ingest.sources.debezium.topics import connect_to_avro

    row = connect_to_avro(connect_row([("id", "int32", None, {}), ("rating", "double", None, {}),
                                       ("weight", "float", None, {}),
                                       ("old", "float64", None, {})]))
    types = {f["name"]: f["type"] for f in row["fields"]}
    assert types == {"id": {"type": "int"}, "rating": ["null", {"type": "double"}],
                     "weight": ["null", {"type": "float"}], "old": ["null", {"type": "double"}]}
    schema, _ = debezium.flat_schema(row, "j", "json")
    assert [f["type"] for f in schema["fields"][1:3]] == [["null", "double"], ["null", "float"]]


def test_json_bytes_and_decimals_are_decoded_by_the_schema(make_settings: Any,
                                                          tmp_path: Path) -> None:
    """A BYTES value is the base64 of its bytes; a Decimal's text is always the base64 of its
    unscaled bytes, even when it also reads as a number (``1111`` is -26630.51 at scale 2,
    ``9E99`` is -0.0000766083 at scale 10), whatever the precision."""
    from python_ingest.sources.debezium.topics import connect_to_avro

    fields = [("id", "int32", None, {}), ("blob", "bytes", None, {}),
              ("price", "bytes", ev.DECIMAL, {"scale": "2", "connect.decimal.precision": "10"}),
              ("tiny", "bytes", ev.DECIMAL, {"scale": "10", "connect.decimal.precision": "20"}),
              ("wide", "bytes", ev.DECIMAL, {"scale": "2", "connect.decimal.precision": "50"})]
    schema = connect_row(fields)
    decoder = json_decoder(make_settings, tmp_path, connect_to_avro(schema))
    price, tiny = Decimal("-26630.51"), Decimal("-0.0000766083")
    after = {"id": 1, "blob": base64.b64encode(bytes.fromhex("f536")).decode(),
             "price": ev.to_json(price, 2), "tiny": ev.to_json(tiny, 10),
             "wide": ev.to_json(price, 2)}
    assert (after["price"], after["tiny"], after["blob"]) == ("1111", "9E99", "9TY=")
    row = decoder.decode(json_message(schema, "c", after, binlog(100)))
    assert (row["blob"], row["price"], row["tiny"], row["wide"]) == (
        bytes.fromhex("f536"), price, tiny, "-26630.51")


def test_json_column_added_at_the_source_stops_the_batch_until_the_schema_has_it(
        make_settings: Any, tmp_path: Path) -> None:
    """``ALTER TABLE ... ADD tip decimal(10,2)``: events carry ``tip``; a job whose .avsc lacks
    it stops loudly (never lands the rows without it); the scaffold's merge adds the column
    (a new version) and the same event then lands with its tip."""
    from python_ingest.scaffold.dbt import ScaffoldResult
    from python_ingest.scaffold.debezium import _row_schema
    from python_ingest.sources.debezium.topics import connect_to_avro

    old = [("id", "int32", None, {}), ("name", "string", None, {})]
    new = [*old, ("tip", "bytes", ev.DECIMAL, {"scale": "2", "connect.decimal.precision": "10"})]
    avsc = tmp_path / "schemas" / "row.avsc"
    avsc.parent.mkdir()
    result = ScaffoldResult()
    assert _row_schema(avsc, connect_to_avro(connect_row(old)), result) == []
    message = json_message(connect_row(new), "c",
                           {"id": 7, "name": "n", "tip": ev.to_json(Decimal("2.50"), 2)},
                           binlog(200))
    decoder = json_decoder(make_settings, tmp_path, json.loads(avsc.read_text()))
    with pytest.raises(ReadError, match=r"carry column\(s\) tip that the job's schema lacks"):
        decoder.decode(message)
    # the scaffold run again: the newest events' columns are added, none removed
    assert _row_schema(avsc, connect_to_avro(connect_row(new)), result) == ["tip"]
    assert _row_schema(avsc, connect_to_avro(connect_row(old)), result) == []
    decoder = json_decoder(make_settings, tmp_path, json.loads(avsc.read_text()))
    assert dict(decoder.schema.payload)["tip"] == "decimal(10,2)"
    row = decoder.decode(message)
    assert (row["id"], row["name"], row["tip"]) == (7, "n", Decimal("2.50"))


def pg_source(lsn: int, last_commit: int | None, snapshot: bool = False) -> dict[str, Any]:
    """A PostgreSQL source block as Debezium writes it (``sequence``: last commit, lsn)."""
    return {"connector": "postgresql", "lsn": lsn, "ts_ms": 1, "txId": 700,
            "snapshot": "true" if snapshot else "false",
            "sequence": json.dumps([None if last_commit is None else str(last_commit),
                                    str(lsn)])}


def test_postgres_unchanged_toast_placeholder_is_a_partial_update(make_settings: Any,
                                                                 tmp_path: Path) -> None:
    """REPLICA IDENTITY DEFAULT: an update leaving TOASTed columns unchanged carries Debezium's
    placeholder (text; Json; bytes, base64 in JSON): those columns are left out of
    ``_changed_columns`` and null, so the merge keeps the lake's values. Avro events too."""
    from python_ingest.sources.debezium.topics import connect_to_avro

    fields = [("id", "int32", None, {}), ("note", "string", None, {}),
              ("doc", "string", "io.debezium.data.Json", {}), ("blob", "bytes", None, {}),
              ("n", "int64", None, {})]
    schema = connect_row(fields)
    placeholder = debezium.UNAVAILABLE
    after = {"id": 3, "note": placeholder, "doc": placeholder,
             "blob": base64.b64encode(placeholder.encode()).decode(), "n": 5}
    decoder = json_decoder(make_settings, tmp_path, connect_to_avro(schema))
    row = decoder.decode(json_message(schema, "u", after, pg_source(900, 800)))
    assert row["_changed_columns"] == ["id", "n"]
    assert (row["note"], row["doc"], row["blob"], row["n"]) == (None, None, None, 5)
    # a real value in the update, and an insert: whole rows
    whole = decoder.decode(json_message(schema, "u", {**after, "note": "x", "doc": "{}",
                                                      "blob": "9TY="}, pg_source(901, 800)))
    assert whole["_changed_columns"] is None and whole["blob"] == bytes.fromhex("f536")
    # Avro: the same placeholder as text and as bytes
    _, fmt = debezium.flat_schema(connect_to_avro(schema), "j", "avro")
    record = debezium.flatten({"op": "u", "before": None, "source": pg_source(902, 800),
                               "after": {"id": 3, "note": placeholder, "doc": "{}",
                                         "blob": placeholder.encode(), "n": 6}}, fmt)
    assert record["_changed_columns"] == ["id", "doc", "n"]
    assert (record["note"], record["blob"]) == (None, None)


def test_postgres_change_committed_after_the_snapshot_outranks_its_rows() -> None:
    """A transaction in flight at the snapshot (changes below the slot's LSN, committed after
    it) must outrank the snapshot's rows; transactions rank in commit order, changes within one
    by their LSN; a later snapshot (its connector's last commit known) outranks what was
    streamed before it and is outranked by what follows."""
    def ref(op: str, source: dict[str, Any]) -> int:
        return debezium.ref_key({"op": op, "source": source}, "position")

    snapshot = ref("r", pg_source(10_000, None, snapshot=True))
    first = ref("u", pg_source(9_000, None))  # in flight at 10000, commits at 10500
    second = [ref("u", pg_source(lsn, 10_500)) for lsn in (9_200, 9_300, 10_800)]  # commit 11000
    third = ref("u", pg_source(11_500, 11_000))
    assert snapshot < first < second[0] < second[1] < second[2] < third
    again = ref("r", pg_source(13_000, 12_000, snapshot=True))  # a new snapshot, 12000 streamed
    before = ref("u", pg_source(11_900, 11_500))  # committed at 12000
    in_flight = ref("u", pg_source(11_950, 12_000))  # in flight at 13000
    after = ref("u", pg_source(13_100, 12_000))
    assert third < before < again < in_flight < after


def test_gtid_ordering_refuses_mysql_gtids_and_keeps_mariadb_across_failover() -> None:
    """MySQL's ``uuid:n`` counts per server: a new primary's first change (n=1) would rank
    below the old primary's; the batch stops naming a safe ordering. MariaDB's
    ``domain-server-seq`` continues on the new primary and ranks across the failover."""
    def at(**source: Any) -> dict[str, Any]:
        return {"op": "u", "source": {"ts_ms": 1, "pos": 4, "row": 0, **source}}

    with pytest.raises(ReadError, match="ordering: position.*sluice tap"):
        debezium.ref_key(at(connector="mysql", file="b.000001",
                            gtid="4e11fa47-71ca-11e1-9e33-c80aa9429562:1"), "gtid")
    old = debezium.ref_key(at(connector="mariadb", file="a.000009", pos=9000, gtid="0-1-41"),
                           "gtid")
    new = debezium.ref_key(at(connector="mariadb", file="b.000001", pos=300, gtid="0-2-42"),
                           "gtid")
    assert old < new


def test_pre_1970_zoned_timestamp_with_a_fraction_is_exact() -> None:
    """``1969-12-31T23:59:59.5Z`` is half a second before the epoch, not half a second
    after it (truncating the negative seconds toward zero landed it one second late)."""
    assert debezium.convert("1969-12-31T23:59:59.500000Z", "zoned", 0) == -500_000
    assert debezium.convert("1950-06-01T12:00:00.000001Z", "zoned", 0) == \
        calendar.timegm((1950, 6, 1, 12, 0, 0)) * 1_000_000 + 1
    assert debezium.convert("1970-01-01T00:00:00.25Z", "zoned", 0) == 250_000


def test_registry_404_is_asked_again_after_a_while(monkeypatch: pytest.MonkeyPatch) -> None:
    """An id the registry does not hold yet (a producer registers, then writes) is not
    believed missing for the process's life: asked again after MISSING_RETRY_S."""
    from python_ingest.changelog import registry

    answers: list[Any] = [None, {"schema": json.dumps({"type": "record", "name": "R",
                                                        "fields": []})}]
    asked: list[str] = []

    def fake_get(self: Any, path: str) -> Any:
        asked.append(path)
        return answers.pop(0)

    monkeypatch.setattr(registry.RegistryClient, "_get", fake_get)
    clock = [1000.0]
    monkeypatch.setattr(registry.time, "monotonic", lambda: clock[0])
    client = registry.RegistryClient("http://registry.invalid:8081")
    assert client.schema(987_654) is None
    assert client.schema(987_654) is None and len(asked) == 1  # within the retry time
    clock[0] += registry.MISSING_RETRY_S + 1
    assert client.schema(987_654) == {"type": "record", "name": "R", "fields": []}
    assert client.schema(987_654) is not None and len(asked) == 2  # kept once found


def test_captured_debezium_json_events_land_equal_to_the_table() -> None:
    """The JSON events Debezium's MariaDB connector really wrote (captured on Kafka Connect,
    tests/sources/debezium/cases/): DOUBLE/FLOAT named ``double``/``float``, BLOB and decimals
    in base64 (``-26630.51`` is ``1111``), a pre-1970 DATETIME, and ``tip`` added while
    streaming: the first event's schema stops at the added column, the scaffold's merged one
    lands every event, and the rows equal the table MariaDB ended with."""
    from tests.sources.debezium import cases

    messages, table = cases.load()
    assert any(v and b'"type":"double"' in v for _, v in messages)
    cases.check_kinds(messages, table)


def test_avro_version_registered_mid_batch_with_a_new_column_stops_the_batch() -> None:
    """Avro through the registry: a version registered after the batch began (an id above
    every one it loaded) that adds ``tip`` would be resolved to the batch's reader, dropping
    ``tip`` silently; the batch stops instead and the next one reads with that version. An
    id of the same row columns decodes as usual."""
    import io
    from dataclasses import replace

    import fastavro

    from python_ingest.changelog.decode import Decoder
    from python_ingest.changelog.schema import ENVELOPE, ChangelogSchema, spark_type

    old = ev.envelope_avro(PREFIX, "items")
    new = json.loads(json.dumps(old))
    new["fields"][0]["type"][1]["fields"].append(
        {"name": "tip", "type": ["null", "string"], "default": None})
    same = json.loads(json.dumps(old))
    same["doc"] = "the same row, another id"

    class Registry:  # the registry's answers by id
        shown_url = "http://registry"

        def schema(self, sid: int) -> dict[str, Any] | None:
            return {2: same, 3: new}.get(sid)

    row = debezium.row_schema(old)
    avro, fmt = debezium.flat_schema(row, "items", "avro")
    payload = tuple((f["name"], spark_type(f["type"], f["name"])) for f in avro["fields"]
                    if f["name"] not in ENVELOPE and f["name"] != debezium.REF_KEY)
    schema = ChangelogSchema(avro=avro, payload=payload, row_key=("id",),
                             ref_key=debezium.REF_KEY, writer_schemas={1: old}, confluent=True,
                             http_registry=Registry())  # type: ignore[arg-type]
    decoder = Decoder(replace(schema, debezium=fmt, envelope=debezium.strip_logical(old)))

    def framed(sid: int, envelope: dict[str, Any], event: dict[str, Any]) -> bytes:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, fastavro.parse_schema(envelope), event)
        return b"\x00" + sid.to_bytes(4, "big") + buffer.getvalue()

    event = ev.change("c", None, ev.row(5, "n5"), ev.source(100))
    assert decoder.decode(framed(2, same, event))["name"] == "n5"
    tipped = {**event, "after": {**event["after"], "tip": "1.50"}}
    with pytest.raises(ReadError, match=r"schema id 3, registered while this batch ran, adds "
                                        r"column\(s\) tip"):
        decoder.decode(framed(3, new, tipped))
