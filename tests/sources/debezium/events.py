"""Hand-built Debezium change events, shaped as Debezium 3.5's MariaDB connector writes them:
the Connect schema of a table with one column of each Debezium type, its Avro form as
Confluent's AvroConverter writes it (``connect.name``, ``connect.parameters``), and a sequence
of snapshot reads, creates, updates, deletes with their tombstones and a key change.

The expected lake value of every column is beside the event (``EXPECTED``), as docs/debezium.md
lists the types.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, date, datetime
from decimal import Context, Decimal
from typing import Any

DECIMAL = "org.apache.kafka.connect.data.Decimal"
EXACT = Context(prec=100)
BIG = Decimal("123456789012345678901234567890123456789012.12345")
# (column, Connect type, Connect logical name, parameters)
COLUMNS: list[tuple[str, str, str | None, dict[str, str]]] = [
    ("id", "int32", None, {}),
    ("name", "string", None, {}),
    ("price", "bytes", DECIMAL, {"scale": "2", "connect.decimal.precision": "10"}),
    ("big_price", "bytes", DECIMAL, {"scale": "5", "connect.decimal.precision": "50"}),
    ("ratio", "struct", "io.debezium.data.VariableScaleDecimal", {}),
    ("born", "int32", "io.debezium.time.Date", {}),
    ("updated", "int64", "io.debezium.time.Timestamp", {}),
    ("updated_us", "int64", "io.debezium.time.MicroTimestamp", {}),
    ("created_ns", "int64", "io.debezium.time.NanoTimestamp", {}),
    ("seen", "string", "io.debezium.time.ZonedTimestamp", {}),
    ("opens", "int64", "io.debezium.time.MicroTime", {}),
    ("doc", "string", "io.debezium.data.Json", {}),
    ("uid", "string", "io.debezium.data.Uuid", {}),
    ("flags", "bytes", "io.debezium.data.Bits", {"length": "10"}),
    ("active", "boolean", None, {}),
    ("yr", "int32", "io.debezium.time.Year", {}),
    ("shape", "struct", "io.debezium.data.geometry.Geometry", {}),
    ("rating", "double", None, {}),  # JsonConverter's type names: float, double (not float64)
    ("blob", "bytes", None, {}),
]
_STRUCTS = {
    "io.debezium.data.VariableScaleDecimal": [("scale", "int32", False), ("value", "bytes", False)],
    "io.debezium.data.geometry.Geometry": [("wkb", "bytes", False), ("srid", "int32", True)],
}
_AVRO = {"int32": "int", "int64": "long", "string": "string", "boolean": "boolean",
         "bytes": "bytes", "float": "float", "double": "double"}


def connect_field(name: str, kind: str, logical: str | None, params: dict[str, str],
                  optional: bool = True) -> dict[str, Any]:
    """One column in the JsonConverter's schema envelope."""
    out: dict[str, Any] = {"type": kind, "optional": optional, "field": name}
    if logical:
        out.update({"name": logical, "version": 1})
    if params:
        out["parameters"] = params
    if kind == "struct":
        out["fields"] = [{"type": t, "optional": o, "field": f}
                         for f, t, o in _STRUCTS[logical or ""]]
    return out


def avro_type(kind: str, logical: str | None, params: dict[str, str]) -> Any:
    """A column's Avro type as Confluent's AvroConverter writes it."""
    if kind == "struct":
        return {"type": "record", "name": (logical or "").rsplit(".", 1)[-1],
                "namespace": (logical or "").rsplit(".", 1)[0],
                "fields": [{"name": f, "type": ["null", _AVRO[t]] if o else _AVRO[t],
                            **({"default": None} if o else {})} for f, t, o in
                           _STRUCTS[logical or ""]],
                "connect.doc": "", "connect.version": 1, "connect.name": logical}
    out: dict[str, Any] = {"type": _AVRO[kind]}
    if logical:
        out.update({"connect.version": 1, "connect.name": logical})
    if params:
        out["connect.parameters"] = params
    if logical == DECIMAL:
        out.update({"logicalType": "decimal", "scale": int(params["scale"]),
                    "precision": int(params["connect.decimal.precision"])})
    return out


def row_avro(prefix: str, table: str) -> dict[str, Any]:
    return {"type": "record", "name": "Value", "namespace": f"{prefix}.{table}",
            "fields": [{"name": n, "type": avro_type(k, lg, p) if n == "id"
                        else ["null", avro_type(k, lg, p)], **({} if n == "id" else
                                                                {"default": None})}
                       for n, k, lg, p in COLUMNS],
            "connect.name": f"{prefix}.{table}.Value"}


SOURCE_FIELDS = [("version", "string"), ("connector", "string"), ("name", "string"),
                 ("ts_ms", "long"), ("snapshot", "string"), ("db", "string"),
                 ("table", "string"), ("server_id", "long"), ("gtid", "string"),
                 ("file", "string"), ("pos", "long"), ("row", "int")]


def envelope_avro(prefix: str, table: str) -> dict[str, Any]:
    """The value schema of the table's topic, as the AvroConverter registers it."""
    row = row_avro(prefix, table)
    source = {"type": "record", "name": "Source", "namespace": "io.debezium.connector.mariadb",
              "fields": [{"name": n, "type": t} if n in ("version", "connector", "name",
                                                         "ts_ms", "db", "server_id", "file",
                                                         "pos", "row")
                         else {"name": n, "type": ["null", t], "default": None}
                         for n, t in SOURCE_FIELDS],
              "connect.name": "io.debezium.connector.mariadb.Source"}
    return {"type": "record", "name": "Envelope", "namespace": f"{prefix}.{table}",
            "fields": [{"name": "before", "type": ["null", row], "default": None},
                       {"name": "after", "type": ["null", f"{prefix}.{table}.Value"],
                        "default": None},
                       {"name": "source", "type": source},
                       {"name": "op", "type": "string"},
                       {"name": "ts_ms", "type": ["null", "long"], "default": None}],
            "connect.version": 2, "connect.name": f"{prefix}.{table}.Envelope"}


def envelope_connect(prefix: str, table: str) -> dict[str, Any]:
    """The same schema as the JsonConverter's envelope (``schemas.enable=true``)."""
    row = {"type": "struct", "optional": True, "name": f"{prefix}.{table}.Value",
           "fields": [connect_field(n, k, lg, p, optional=n != "id") for n, k, lg, p in COLUMNS]}
    source = {"type": "struct", "optional": False, "name": "io.debezium.connector.mariadb.Source",
              "field": "source",
              "fields": [{"type": {"long": "int64", "int": "int32"}.get(t, t), "optional": False,
                          "field": n} for n, t in SOURCE_FIELDS]}
    return {"type": "struct", "optional": False, "name": f"{prefix}.{table}.Envelope",
            "fields": [{**row, "field": "before"}, {**row, "field": "after"}, source,
                       {"type": "string", "optional": False, "field": "op"},
                       {"type": "int64", "optional": True, "field": "ts_ms"}]}


def row(i: int, name: str) -> dict[str, Any]:
    """A row image in Avro terms (Decimal, bytes, nested records)."""
    return {
        "id": i, "name": name, "price": Decimal(f"{i}.25"),
        "big_price": EXACT.add(BIG, Decimal(i)),
        "ratio": {"scale": 3, "value": (12345 + i).to_bytes(4, "big", signed=True)},
        "born": 19000 + i, "updated": 1_767_225_600_123 + i,
        "updated_us": 1_767_225_600_123_456 + i, "created_ns": 1_767_225_600_123_456_789 + i,
        "seen": f"2026-03-01T10:00:0{i % 10}.123456Z", "opens": 3_723_000_001 + i,
        "doc": json.dumps({"k": i}), "uid": f"00000000-0000-0000-0000-{i:012d}",
        "flags": (512 + i).to_bytes(2, "little"), "active": i % 2 == 0, "yr": 2000 + i,
        "shape": {"wkb": bytes.fromhex("0101000000") + i.to_bytes(8, "little"), "srid": None},
        "rating": i + 0.5, "blob": bytes([0xF5, 0x36, i]),
    }


def expected(i: int, name: str) -> dict[str, Any]:
    """The raw (and lake) values of ``row(i, name)``."""
    return {
        "id": i, "name": name, "price": Decimal(f"{i}.25"),
        "big_price": str(EXACT.add(BIG, Decimal(i))),
        "ratio": str(Decimal(12345 + i).scaleb(-3)),
        "born": date.fromordinal(date(1970, 1, 1).toordinal() + 19000 + i),
        "updated": datetime.fromtimestamp((1_767_225_600_123 + i) / 1000, UTC),
        "updated_us": datetime.fromtimestamp(1_767_225_600, UTC).replace(
            microsecond=123_456 + i),
        "created_ns": datetime.fromtimestamp(1_767_225_600, UTC).replace(microsecond=123_456),
        "seen": datetime(2026, 3, 1, 10, 0, i % 10, 123456, UTC),
        "opens": f"01:02:03.{1 + i:06d}".rstrip("0"),
        "doc": json.dumps({"k": i}), "uid": f"00000000-0000-0000-0000-{i:012d}",
        "flags": 512 + i, "active": i % 2 == 0, "yr": 2000 + i,
        "shape": bytes.fromhex("0101000000") + i.to_bytes(8, "little"),
        "rating": i + 0.5, "blob": bytes([0xF5, 0x36, i]),
    }


def source(pos: int, row_in_event: int = 0, file: str = "mariadb-bin.000002",
           snapshot: str | None = None, ts_ms: int = 1_767_225_700_000) -> dict[str, Any]:
    return {"version": "3.5.0.Final", "connector": "mariadb", "name": "dbz", "ts_ms": ts_ms,
            "snapshot": snapshot, "db": "shop", "table": "items", "server_id": 1,
            "gtid": None, "file": file, "pos": pos, "row": row_in_event}


def change(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None,
           src: dict[str, Any]) -> dict[str, Any]:
    return {"before": before, "after": after, "source": src, "op": op,
            "ts_ms": src["ts_ms"] + 5}


def workload() -> list[tuple[int, dict[str, Any] | None]]:
    """(key id, event or None for a tombstone), in topic order, and what the lake ends with:
    a snapshot, creates, updates (one event with two rows), a delete, a key change, a rotation
    to the next binlog file."""
    events: list[tuple[int, dict[str, Any] | None]] = [
        (i, change("r", None, row(i, f"snap{i}"), source(1000, snapshot="true")))
        for i in (1, 2, 3)]
    events += [
        (4, change("c", None, row(4, "new4"), source(2000))),
        (1, change("u", row(1, "snap1"), row(1, "upd1"), source(2100))),
        (3, change("u", row(3, "snap3"), row(3, "upd3"), source(2300, 0))),
        (4, change("u", row(4, "new4"), row(4, "upd4"), source(2300, 1))),
        (2, change("d", row(2, "snap2"), None, source(2400))),
        (2, None),
        (3, change("d", row(3, "upd3"), None, source(2500, 0))),  # key 3 -> 30
        (3, None),
        (30, change("c", None, row(30, "upd3"), source(2500, 1))),
        (1, change("u", row(1, "upd1"), row(1, "last1"), source(4, file="mariadb-bin.000003"))),
    ]
    return events


FINAL = {1: "last1", 4: "upd4", 30: "upd3"}  # the table after the workload (id -> name)


def to_json(value: Any, scale: int = 0) -> Any:
    """A row value as the JsonConverter writes it (bytes and decimals as base64)."""
    if isinstance(value, Decimal):
        unscaled = int(value.scaleb(scale, EXACT))  # two's complement, shortest, as Connect does
        size = (unscaled.bit_length() + 8) // 8
        return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    return value


def json_row(image: dict[str, Any] | None) -> dict[str, Any] | None:
    if image is None:
        return None
    scales = {n: int(p.get("scale", 0)) for n, _, _, p in COLUMNS}
    return {k: to_json(v, scales.get(k, 0)) for k, v in image.items()}


def json_event(event: dict[str, Any], prefix: str, table: str, with_schema: bool) -> bytes:
    payload = {**event, "before": json_row(event["before"]), "after": json_row(event["after"])}
    body = {"schema": envelope_connect(prefix, table), "payload": payload} if with_schema \
        else payload
    return json.dumps(body, separators=(",", ":")).encode()  # as compact as the converter
