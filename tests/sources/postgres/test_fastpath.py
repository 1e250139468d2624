"""The tap's fast path (python_ingest/sources/postgres/fastpath.py) gives the bytes the general
path gives (pgoutput.decode → events.py → the Encoder), type by type and for edge values, and
hands every change it must not publish itself back to the general path. No server needed."""

from __future__ import annotations

import struct

import pytest

from python_ingest.changelog.schema import KEY_SEPARATOR
from python_ingest.sources.postgres import events, pgoutput
from python_ingest.sources.postgres.columns import PgType, converter, spec_of
from python_ingest.sources.postgres.events import PgTable
from python_ingest.sources.postgres.fastpath import FastTable, RefKeys
from python_ingest.sources.postgres.position import MAX_CHANGES, ref_key
from python_ingest.sources.tap.changes import Envelope
from python_ingest.sources.tap.encoder import envelope_tail, long_bytes
from python_ingest.sources.tap.producer import Encoder
from python_ingest.sources.tap.registry import PRIMARY, KeyChoice, TableShape

pytestmark = pytest.mark.postgres_source

OID = 16401


def numeric(p: int, s: int) -> int:
    return ((p << 16) | s) + 4


COLUMNS = (  # name, type name, category, typmod, server texts (the output function's)
    ("id", "int4", "N", -1, ["1", "-2147483648", "2147483647"]),
    ("i2", "int2", "N", -1, ["-32768", "0"]),
    ("i8", "int8", "N", -1, ["-9223372036854775808", "9223372036854775807", "63", "64"]),
    ("num", "numeric", "N", numeric(10, 3), ["1234567.891", "-0.001", "0.000", "-0.000"]),
    ("num0", "numeric", "N", numeric(12, 0), ["-12", "0", "999999999999"]),
    ("num_free", "numeric", "N", -1, ["123456789012345678901234567890.123456789", "NaN",
                                      "-Infinity"]),
    ("num_wide", "numeric", "N", numeric(50, 10),
     ["-12345678901234567890123456789.0123456789"]),
    ("f4", "float4", "N", -1, ["NaN", "Infinity", "-Infinity", "1.5", "-0.1", "3.4028235e+38",
                               "1e-45"]),
    ("f8", "float8", "N", -1, ["-Infinity", "0.1", "1e+300", "-0", "5e-324"]),
    ("t", "text", "S", -1, ["naïve ✓ 日本", "", "x" * 300, "emoji 🚀"]),
    ("ch", "bpchar", "S", 9, ["ab   "]),
    ("by", "bytea", "U", -1, ["\\x00ff10", "\\x", "\\x" + "ab" * 200]),
    ("bo", "bool", "B", -1, ["t", "f"]),
    ("d", "date", "D", -1, ["0044-03-15 BC", "infinity", "-infinity", "2024-02-29"]),
    ("ts", "timestamp", "D", -1, ["2024-01-02 03:04:05.123456", "-infinity", "1900-01-01 00:00:00",
                                  "0001-01-01 00:00:00 BC"]),
    ("tstz", "timestamptz", "D", -1, ["2024-01-02 01:04:05.5+00", "infinity",
                                      "1969-12-31 23:59:59.999999+00"]),
    ("tm", "time", "D", -1, ["13:14:15.5"]),
    ("iv", "interval", "T", -1, ["P1Y2M3DT4H5M6.5S"]),
    ("u", "uuid", "U", -1, ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"]),
    ("jsb", "jsonb", "U", -1, ['{"a": [1, 2], "b": "é"}']),
    ("ints", "_int4", "A", -1, ["{1,2,NULL}"]),
    ("m", "money", "N", -1, ["-$1,234.50", "$0.00", "$92,233,720,368,547,758.07"]),
    ("bits", "bit", "V", 4, ["1010"]),
)


def _table(columns=COLUMNS, key: tuple[str, ...] = ("id",)) -> PgTable:
    specs, converters = [], []
    for i, (name, type_name, category, typmod, _texts) in enumerate(columns):
        pg_type = PgType(100 + i, type_name, category, typmod)
        spec = spec_of(name, pg_type, nullable=name not in key)
        specs.append(spec)
        converters.append(converter(spec, pg_type))
    shape = TableShape("public", "every", tuple(specs), KeyChoice(PRIMARY, key))
    return PgTable(shape, 7, Encoder(7, shape.avro()), "t.public.every", tuple(converters),
                   False)


def _tuple(values: list[str | None | object]) -> bytes:
    out = struct.pack(">h", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v is pgoutput.UNCHANGED:
            out += b"u"
        else:
            data = str(v).encode()
            out += b"t" + struct.pack(">i", len(data)) + data
    return out


def _insert(values: list) -> bytes:
    return b"I" + struct.pack(">I", OID) + b"N" + _tuple(values)


def _general(table: PgTable, payload: bytes, ref: int, env: Envelope) -> tuple[bytes, bytes]:
    """What the general path publishes for ``payload`` (the tap's _handle and publish)."""
    msg = pgoutput.decode(payload)
    if isinstance(msg, pgoutput.Insert):
        change = events.insert(table, msg.new, ref, env)
    elif isinstance(msg, pgoutput.Delete):
        change = events.delete(table, msg.old, ref, env)
    else:
        (change,) = events.update(table, msg.old, msg.new, ref, env)
    assert not change.problems and change.key is not None, change.problems
    return change.key.encode(), table.encoder.encode(dict(change.record))


def _rows() -> list[list[str | None]]:
    """Rows that go through every text of every column (the longest list decides)."""
    longest = max(len(c[4]) for c in COLUMNS)
    return [[c[4][n % len(c[4])] for c in COLUMNS] for n in range(longest)]


@pytest.mark.parametrize("data_center", [None, "dc-1"])
def test_every_type_and_edge_value_gives_the_general_paths_bytes(data_center) -> None:
    table = _table()
    fast = FastTable.of(table)
    assert fast is not None
    env = Envelope("postgres", 1_700_000_000_123, data_center)
    nulls = ["0"] + [None] * (len(COLUMNS) - 1)  # every value but the key NULL
    for n, row in enumerate([*_rows(), nulls]):
        ref = (0x16B3748 << 18) | n
        for payload, deleted in ((_insert(row), False),
                                 (b"U" + struct.pack(">I", OID) + b"N" + _tuple(row), False),
                                 (b"D" + struct.pack(">I", OID) + b"K" + _tuple(row), True)):
            tail = envelope_tail("postgres", env.event_ts_ms, data_center, deleted)
            assert fast.encode(payload, 6, ref, tail) == \
                _general(table, payload, ref, env), \
                (row, chr(payload[0]))


def test_keys_composite_and_of_every_kind_match_the_general_path() -> None:
    env = Envelope("postgres", 5, None)
    tail = envelope_tail("postgres", 5, None, False)
    # the key's columns in another order than the table's, of kinds whose key text is not
    # the server's text (dates, timestamps, decimals, booleans)
    table = _table(key=("tstz", "d", "num", "bo", "t"))
    fast = FastTable.of(table)
    assert fast is not None and not fast.raw_key
    for row in _rows():
        payload = _insert(row)
        assert fast.encode(payload, 6, 9, tail) == _general(table, payload, 9, env)
    # a text key: the server's bytes are the key
    table = _table(key=("t",))
    fast = FastTable.of(table)
    assert fast is not None and fast.raw_key
    payload = _insert(_rows()[0])
    assert fast.encode(payload, 6, 9, tail)[0] == "naïve ✓ 日本".encode()  # type: ignore[index]
    # a composite key part holding the separator: the general path decides (it refuses)
    table = _table(key=("id", "t"))
    fast = FastTable.of(table)
    row = _rows()[0]
    row[9] = f"a{KEY_SEPARATOR}b"
    assert fast is not None and fast.encode(_insert(row), 6, 9, tail) is None


def test_changes_the_fast_path_leaves_to_the_general_path() -> None:
    table = _table()
    fast = FastTable.of(table)
    assert fast is not None
    tail = envelope_tail("postgres", 5, None, False)
    row = _rows()[0]
    assert fast.encode(_insert(row), 6, 1, tail) is not None
    cases = {
        "an unchanged TOASTed value": {9: pgoutput.UNCHANGED},
        "a key without a value": {0: None},
        "a numeric NaN in numeric(p,s)": {3: "NaN"},
        "more decimals than the scale": {3: "1.2345"},
        "bytea not in hex": {11: "abc"},
        "an integer the column cannot be": {0: "x"},
    }
    for why, change in cases.items():
        values = list(row)
        for index, value in change.items():
            values[index] = value
        assert fast.encode(_insert(values), 6, 1, tail) is None, why
    assert fast.encode(_insert(row[:-1]), 6, 1, tail) is None  # another column count
    big = list(row)
    big[9] = "x" * 1_000_000  # over Kafka's message limit: the general path leaves it out
    assert fast.encode(_insert(big), 6, 1, tail) is None


def test_tables_the_fast_path_does_not_take() -> None:
    from python_ingest.sources.tap.registry import CHANGELOG, ROW

    for key in (KeyChoice(ROW), KeyChoice(CHANGELOG), KeyChoice(PRIMARY, ("f8",), True)):
        table = _table()
        shape = TableShape("public", "every", table.shape.columns, key)
        other = PgTable(shape, 7, Encoder(7, shape.avro()), "t", table.converters, False)
        assert FastTable.of(other) is None, key


@pytest.mark.parametrize("value", [0, 1, -1, 63, 64, -65, 2**31, -(2**63), 2**63 - 1])
def test_long_bytes_is_avros_zigzag_varint(value) -> None:
    import io

    import fastavro

    out = io.BytesIO()
    fastavro.schemaless_writer(out, {"type": "long"}, value)
    assert long_bytes(value) == out.getvalue()


@pytest.mark.parametrize("lsn", [0x16B3748, 0x16B374B, 0x3FFFFF, 0x1000000007, 1, 0])
def test_ref_keys_bytes_are_the_ref_keys_avro_long(lsn) -> None:
    refs = RefKeys()
    refs.begin(ref_key(lsn, 0))
    for index in (0, 1, 63, 64, 8191, 8192, (1 << 18) - 1, 1 << 18, MAX_CHANGES - 1):
        assert refs.encode(index) == long_bytes(ref_key(lsn, index)), (lsn, index)


@pytest.mark.parametrize("value", [0, 1, 127, 128, 16383, 16384, 2097151, 2097152, 2**49 + 5])
def test_varint_is_avros_for_every_length(value) -> None:
    from python_ingest.sources.postgres.fastpath import varint

    groups, rest = [], value
    while True:  # seven bits at a time, low first, the high bit set on all but the last
        groups.append(rest & 127)
        rest >>= 7
        if not rest:
            break
    assert varint(value) == bytes([g | 128 for g in groups[:-1]] + groups[-1:])
