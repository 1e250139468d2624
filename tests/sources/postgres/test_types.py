"""Every PostgreSQL type the source supports, value by value: what the tap publishes (the
Avro value the lake gets, docs/types.md) for edge values, and the same values from the
snapshot's copy as from the stream."""

from __future__ import annotations

import io
import json
import struct
from datetime import date
from decimal import Decimal

import fastavro
import pytest

pytestmark = pytest.mark.postgres_source

EPOCH = date(1970, 1, 1)
DAY_US = 86_400_000_000


def days(d: date) -> int:
    return (d - EPOCH).days


def bc_days(year_bc: int, month: int, day: int) -> int:
    """Days since 1970 of a proleptic Gregorian BC date (year 1 BC is year 0): shifted by
    400-year cycles of 146097 days into Python's range."""
    astronomical = 1 - year_bc
    cycles = (-astronomical) // 400 + 1
    return days(date(astronomical + 400 * cycles, month, day)) - 146097 * cycles


TABLE = """
CREATE TYPE mood AS ENUM ('sad', 'happy');
CREATE DOMAIN posint AS integer CHECK (VALUE > 0);
CREATE DOMAIN price AS numeric(6,2);
CREATE TABLE every_type (
  id int PRIMARY KEY, i2 smallint, i4 integer, i8 bigint, num numeric(10,3), num_free numeric,
  num_wide numeric(50,10), f4 real, f8 double precision, t text, vc varchar(5), ch char(5),
  by bytea, bo boolean, d date, ts timestamp(6), tstz timestamptz, tm time, tmtz timetz,
  iv interval, u uuid, js json, jsb jsonb, ints int[], texts text[], m mood, ip inet,
  net cidr, mac macaddr, money_ money, bits bit(4), vbits varbit, pos posint, pr price)
"""

ROW = {  # column: (SQL literal, the Avro value published)
    "i2": ("-32768", -32768),
    "i4": ("2147483647", 2147483647),
    "i8": ("-9223372036854775808", -9223372036854775808),
    "num": ("1234567.891", Decimal("1234567.891")),
    "num_free": ("'123456789012345678901234567890.123456789'",
                 "123456789012345678901234567890.123456789"),
    "num_wide": ("'-12345678901234567890123456789.0123456789'",
                 "-12345678901234567890123456789.0123456789"),
    "f4": ("'NaN'", "NaN"),
    "f8": ("'-Infinity'", float("-inf")),
    "t": ("'naïve ✓ 日本'", "naïve ✓ 日本"),
    "vc": ("'abc'", "abc"),
    "ch": ("'ab'", "ab   "),  # char(n): padded, as PostgreSQL returns it
    "by": ("'\\x00ff10'::bytea", b"\x00\xff\x10"),
    "bo": ("true", True),
    "d": ("'0044-03-15 BC'", bc_days(44, 3, 15)),
    "ts": ("'2024-01-02 03:04:05.123456'", days(date(2024, 1, 2)) * DAY_US
           + (3 * 3600 + 4 * 60 + 5) * 1_000_000 + 123456),
    "tstz": ("'2024-01-02 03:04:05.5+02'", days(date(2024, 1, 2)) * DAY_US
             + (1 * 3600 + 4 * 60 + 5) * 1_000_000 + 500000),
    "tm": ("'13:14:15.5'", "13:14:15.5"),
    "tmtz": ("'13:14:15+02'", "13:14:15+02"),
    "iv": ("'1 year 2 months 3 days 04:05:06.5'", "P1Y2M3DT4H5M6.5S"),
    "u": ("'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    "js": ("'{\"b\": 1,  \"a\": [1,2]}'", '{"b": 1,  "a": [1,2]}'),
    "jsb": ("'{\"b\": 1,  \"a\": [1,2]}'", '{"a": [1, 2], "b": 1}'),
    "ints": ("'{1,2,NULL}'", "{1,2,NULL}"),
    "texts": ("ARRAY['a b', 'c']", '{"a b",c}'),
    "m": ("'happy'", "happy"),
    "ip": ("'192.168.0.1/24'", "192.168.0.1/24"),
    "net": ("'10.0.0.0/8'", "10.0.0.0/8"),
    "mac": ("'08:00:2b:01:02:03'", "08:00:2b:01:02:03"),
    "money_": ("'-1234.5'", Decimal("-1234.50")),
    "bits": ("B'1010'", "1010"),
    "vbits": ("B'101'", "101"),
    "pos": ("5", 5),
    "pr": ("'12.5'", Decimal("12.50")),
}
EDGES = {  # a second row: other edge values
    "f4": ("'Infinity'", float("inf")),
    "f8": ("'0.1'", 0.1),
    "num_free": ("'NaN'", "NaN"),
    "d": ("'infinity'", days(date(9999, 12, 31))),
    "ts": ("'-infinity'", days(date(1, 1, 1)) * DAY_US),
    "tstz": ("'infinity'", days(date(9999, 12, 31)) * DAY_US + DAY_US - 1),
    "bo": ("false", False),
    "t": ("''", ""),
    "by": ("''::bytea", b""),
}


def _raw_events(env, table: str) -> list[dict]:
    """The topic's records with dates and timestamps as their plain integers (Python's date
    cannot hold a BC date)."""
    schemas = {}
    for path in (env.tmp / "registry" / f"public.{table}").glob("*.avsc"):
        schema = json.loads(path.read_text())
        for field in schema["fields"]:
            branch = field["type"][1] if isinstance(field["type"], list) else None
            if isinstance(branch, dict) and branch.get("logicalType") in (
                    "date", "timestamp-micros"):
                field["type"] = ["null", branch["type"]]
        schemas[int(path.stem)] = fastavro.parse_schema(schema)
    out = []
    for _key, value in env.messages(table):
        _magic, sid = struct.unpack(">bI", value[:5])
        out.append(fastavro.schemaless_reader(io.BytesIO(value[5:]), schemas[sid], None))
    return sorted(out, key=lambda r: r["_ref_key"])


def _insert(env, row_id: int, values: dict) -> None:
    columns = ", ".join(values)
    env.sql(f"INSERT INTO every_type (id, {columns}) VALUES ({row_id}, "
            f"{', '.join(v[0] for v in values.values())})")


def _check(record: dict, values: dict, where: str) -> None:
    for column, (_sql, want) in values.items():
        got = record[column]
        if want == "NaN" and column == "f4":
            assert got != got, (where, column, got)
            continue
        assert got == want and type(got) is type(want), (where, column, got, want)


def test_every_type_value_by_value_from_the_stream_and_the_snapshot(pg_env) -> None:
    env = pg_env
    env.sql(TABLE)
    _insert(env, 1, ROW)  # before the slot: copied by the snapshot
    _insert(env, 2, {**ROW, **EDGES})
    env.add_jobs()
    env.bootstrap_all()
    _insert(env, 11, ROW)  # after it: streamed
    _insert(env, 12, {**ROW, **EDGES})
    env.sql("INSERT INTO every_type (id) VALUES (13)")  # every value NULL
    env.tap_until_end()
    records = {r["id"]: r for r in _raw_events(env, "every_type")}
    for row_id, where in ((1, "snapshot"), (11, "stream")):
        _check(records[row_id], ROW, where)
        _check(records[row_id + 1], {**ROW, **EDGES}, where)
        assert {k: v for k, v in records[row_id].items() if not k.startswith("_")
                and k != "id" and k != "f4"} == \
            {k: v for k, v in records[1].items() if not k.startswith("_") and k not in
             ("id", "f4")}
    assert all(records[13][c] is None for c in ROW)
    schema = env.decoder("every_type").schema
    assert schema is not None
    registered = (env.tmp / "registry" / "public.every_type" / "1.avsc").read_text()
    assert '"precision": 10' in registered and '"precision": 19' in registered


def test_a_value_a_column_cannot_hold_lands_as_null_with_an_error_record(pg_env) -> None:
    """numeric(5,2) holds NaN in PostgreSQL, a decimal cannot: null, and an error record."""
    env = pg_env
    env.start_tapping("CREATE TABLE prices (id int PRIMARY KEY, p numeric(5,2))")
    env.sql("INSERT INTO prices VALUES (1, 'NaN'), (2, 3.5)")
    tap = env.tap_until_end()
    assert tap.stats.errors == 1
    records = {r["id"]: r for r in _raw_events(env, "prices")}
    assert records[1]["p"] is None and records[2]["p"] == Decimal("3.50")


@pytest.mark.reliability
def test_numeric_with_scale_above_precision_is_a_valid_decimal(pg_env) -> None:
    """numeric(3,5) (PostgreSQL 15) holds 0.00123: decimal(5,5), valid for Avro and Spark (a
    decimal(3,5) is not), the same value from the snapshot and the stream (#50.15)."""
    env = pg_env
    env.sql("CREATE TABLE tiny (id int PRIMARY KEY, x numeric(3,5), y numeric(2,4))",
            "INSERT INTO tiny VALUES (1, 0.00123, -0.0099)")
    env.add_jobs()
    env.bootstrap_all()
    env.sql("INSERT INTO tiny VALUES (2, -0.00999, 0.0001), (3, NULL, 0)")
    tap = env.tap_until_end()
    assert tap.stats.errors == 0 and not tap.stopped
    registered = json.loads((env.tmp / "registry" / "public.tiny" / "1.avsc").read_text())
    types = {f["name"]: f["type"][1] for f in registered["fields"] if f["name"] in "xy"}
    assert types["x"]["precision"] == 5 and types["x"]["scale"] == 5
    assert types["y"]["precision"] == 4 and types["y"]["scale"] == 4
    records = {r["id"]: r for r in _raw_events(env, "tiny")}
    assert records[1]["x"] == Decimal("0.00123") and records[1]["y"] == Decimal("-0.0099")
    assert records[2]["x"] == Decimal("-0.00999") and records[2]["y"] == Decimal("0.0001")
    assert records[3]["x"] is None and records[3]["y"] == Decimal("0.0000")
    assert env.assert_equal("tiny") == 3
