"""The tap's C encoder (python_ingest/sources/postgres/tuplecodec.c, built by native.py) gives
the bytes of fastpath.py's generated Python encoder, the reference, for every column kind it
takes and every edge value, and hands back to it every row it does not handle (the Python
encoder's answer, None included, is then what the tap gets). No server needed."""

from __future__ import annotations

import struct
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from python_ingest.sources.postgres import native, pgoutput
from python_ingest.sources.postgres.fastpath import FastTable
from python_ingest.sources.tap.encoder import envelope_tail
from tests.sources.postgres.test_fastpath import COLUMNS, _insert, _table, _tuple

pytestmark = [pytest.mark.postgres_source, pytest.mark.reliability]

_NOT_NATIVE = ("by", "m")  # bytea and money: the table stays on the Python encoder
NATIVE_COLUMNS = tuple(c for c in COLUMNS if c[0] not in _NOT_NATIVE)
TAIL = envelope_tail("postgres", 1_700_000_000_123, "dc-1", False)
REF = (0x16B3748 << 18) | 5


@pytest.fixture(scope="module")
def codec():
    module = native.codec()
    if module is None:
        pytest.skip("no C compiler here: the tap runs on the Python encoder alone")
    return module


def _fast(columns=NATIVE_COLUMNS, key=("id",)) -> FastTable:
    fast = FastTable.of(_table(columns, key))
    assert fast is not None
    return fast


def _same(fast: FastTable, payload: bytes) -> tuple[bytes, bytes] | None:
    """The C encoder's answer, checked against the Python encoder's."""
    found = fast.encode(payload, 6, REF, TAIL)
    assert found == fast.python_encode(payload, 6, REF, TAIL), payload
    return found


def test_the_tables_of_its_kinds_take_the_c_encoder(codec) -> None:
    assert isinstance(_fast().encode, partial)
    assert isinstance(_fast(key=("t",)).encode, partial)  # a text key
    # bytea or money, or a key that is not one column's text: the Python encoder alone
    assert not isinstance(_fast(COLUMNS).encode, partial)
    assert not isinstance(_fast(key=("id", "t")).encode, partial)


def test_every_kind_and_edge_value_gives_the_python_encoders_bytes(codec) -> None:
    fast = _fast()
    longest = max(len(c[4]) for c in NATIVE_COLUMNS)
    encoded = 0
    for n in range(longest):
        row = [c[4][n % len(c[4])] for c in NATIVE_COLUMNS]
        for column in range(1, len(row)):  # each value alone too, the others NULL
            alone = ["7"] + [None] * (len(row) - 1)
            alone[column] = row[column]
            encoded += _same(fast, _insert(alone)) is not None
        encoded += _same(fast, _insert(row)) is not None
    assert encoded > longest * len(NATIVE_COLUMNS) // 2  # most of them are encoded, not None


@pytest.mark.parametrize("why, column, value", [
    ("a key without a value", 0, None),
    ("an unchanged TOASTed value", 9, pgoutput.UNCHANGED),
    ("a numeric NaN", 3, "NaN"),
    ("more decimals than the scale", 3, "1.2345"),
    ("a numeric of more than 18 digits", 6, "-12345678901234567890123456789.0123456789"),
    ("an integer past 64 bits", 2, "9223372036854775808"),
    ("an integer the column cannot be", 0, "x"),
    ("a float past float4", 7, "1e39"),
    ("a date before year 1", 13, "0044-03-15 BC"),
])
def test_rows_it_leaves_to_the_python_encoder(codec, why, column, value) -> None:
    fast = _fast()
    row = [c[4][0] for c in NATIVE_COLUMNS]
    row[column] = value
    _same(fast, _insert(row))


def test_bytes_that_are_not_utf8_a_marker_key_a_column_count_and_the_size_limit(codec) -> None:
    fast = _fast()
    row = [c[4][0] for c in NATIVE_COLUMNS]
    bad = bytearray(_insert(row))
    at = bad.index("naïve".encode())
    bad[at + 2] = 0xFF  # inside 'ï'
    assert _same(fast, bytes(bad)) is None
    assert _same(fast, _insert(row[:-1])) is None
    big = list(row)
    big[9] = "x" * 1_000_000
    assert _same(fast, _insert(big)) is None
    keyed = _fast(key=("t",))
    for key in ("∅", "", "∅∅"):
        row[9] = key
        assert _same(keyed, _insert(row)) is None
    row[9] = "∅ not only"
    assert _same(keyed, _insert(row)) is not None


def test_a_converted_columns_last_value_is_shared_with_the_python_encoder(codec) -> None:
    fast = _fast()
    stamps = ["2024-01-02 03:04:05.123456", "2024-01-02 03:04:05.123456", "1900-01-01 00:00:00",
              "2024-01-02 03:04:05.123456", "-infinity", "not a time"]
    for n, stamp in enumerate(stamps):
        row = [str(n)] + [None] * (len(NATIVE_COLUMNS) - 1)
        row[14] = stamp  # ts
        _same(fast, _insert(row))
        payload = _insert(row)
        assert fast.encode(payload, 6, REF, TAIL) == fast.encode(payload, 6, REF, TAIL)


@settings(max_examples=300, deadline=None)
@given(st.integers(-(2**63), 2**63 - 1), st.integers(-(10**12), 10**12),
       st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=80),
       st.booleans())
def test_random_values_give_the_python_encoders_bytes(key, cents, number, text, flag) -> None:
    if native.codec() is None:
        pytest.skip("no C compiler")
    fast = _fast()
    row = [c[4][0] for c in NATIVE_COLUMNS]
    row[0] = str(key % 2**31)
    row[2] = str(key)  # int8
    row[3] = f"{cents / 1000:.3f}"  # numeric(10,3)
    row[4] = str(cents)  # numeric(12,0)
    row[7] = repr(number)  # float4 (past its range: the Python encoder's None)
    row[8] = repr(number)  # float8
    row[9] = text.replace("\x00", "")
    row[12] = "t" if flag else "f"
    payload = b"U" + struct.pack(">I", 16401) + b"N" + _tuple(row)
    _same(fast, payload)


def test_the_tap_ends_equal_to_its_table_with_and_without_the_c_module(pg_env,
                                                                       monkeypatch) -> None:
    """The same changes tapped once on wire.py's and fastpath.py's Python loops (no C module)
    and once on tuplecodec.c's: the topic replays to the table both times."""
    env = pg_env
    env.sql("CREATE TABLE nat (id int PRIMARY KEY, name text, amount numeric(10,2), "
            "qty int, at timestamptz, note text)")
    env.add_jobs()
    env.tap_until_end()
    env.sql("INSERT INTO nat SELECT g, 'n ' || g, g / 100.0, g % 7, now() - g * interval '1 s', "
            "CASE WHEN g % 3 = 0 THEN NULL ELSE 'ünï' END FROM generate_series(1, 3000) g")
    monkeypatch.setattr(native, "codec", lambda: None)
    python_only = env.tap_until_end()
    assert python_only.stats.row_changes == 3000
    assert env.assert_equal("nat") == 3000
    monkeypatch.undo()
    env.sql("UPDATE nat SET qty = qty + 1, name = name || 'x', at = now() WHERE id % 2 = 0",
            "DELETE FROM nat WHERE id % 5 = 0")
    with_c = env.tap_until_end()
    assert with_c.stats.row_changes == 1500 + 600
    assert env.assert_equal("nat") == 2400
