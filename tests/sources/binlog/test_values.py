"""Quick unit tests of values and keys: calendar arithmetic and the zero-date policy, binlog
TIME decoding, MariaDB's INET6 text, ENUM/SET member lists, the key choice, full-row identity
copies, and the checks of the ``key_columns`` setting. The whole way (server, tap, pipeline) is
in test_fidelity.py."""

from __future__ import annotations

import io
import json
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from python_ingest.config import load_settings
from python_ingest.exceptions import ConfigError, IncompatibleSchemaChange
from python_ingest.sources.binlog import decoding
from python_ingest.sources.binlog.columns import key_text, make_spec, to_avro
from python_ingest.sources.binlog.events import TappedTable, changes
from python_ingest.sources.binlog.position import BinlogPosition
from python_ingest.sources.binlog.values import (
    ZERO_DAY,
    RawDate,
    RawDateTime,
    RawTime,
    RawTimestamp,
    civil_from_days,
    date_text,
    days_from_civil,
    inet6_text,
    quoted_list,
    time_text,
    zero_day,
)
from python_ingest.sources.tap.changes import DELETE, INSERT, UPDATE, Envelope
from python_ingest.sources.tap.keys import RowCounts, check_setting, decide
from python_ingest.sources.tap.producer import Encoder
from python_ingest.sources.tap.registry import KeyChoice, Registry, TableShape


def test_calendar_arithmetic_matches_python_and_reaches_every_year() -> None:
    epoch = date(1970, 1, 1)
    for days in range(-719162, 2932897, 97):  # 0001-01-01 .. 9999-12-31
        d = epoch + timedelta(days=days)
        assert days_from_civil(d.year, d.month, d.day) == days
        assert civil_from_days(days) == (d.year, d.month, d.day)
    for days in range(-6_000_000, -719162, 1013):  # before year 1: round trip
        assert days_from_civil(*civil_from_days(days)) == days
    assert date_text(ZERO_DAY) == "-0001-12-31" and date_text(days_from_civil(0, 1, 1)) == \
        "0000-01-01"


def test_zero_dates_are_null_when_nullable_else_distinct_days_before_year_zero() -> None:
    nullable, required = make_spec("d", "date"), make_spec("d", "date", nullable=False)
    for raw in (RawDate(0, 0, 0), RawDate(2020, 0, 15), RawDate(2021, 2, 30), "2020-05-00"):
        assert to_avro(nullable, raw) is None
    combos = [(y, m, d) for y in (0, 1, 2020, 9999) for m in range(13) for d in range(32)]
    days = {(y, m, d): to_avro(required, RawDate(y, m, d)) for y, m, d in combos}
    assert len(set(days.values())) == len(combos)  # distinct source values stay distinct
    year_zero = days_from_civil(0, 1, 1)
    for (y, m, d), day in days.items():
        if _valid(y, m, d):
            assert day == days_from_civil(y, m, d) >= year_zero
        else:
            assert day < year_zero  # no valid date lands there
    assert to_avro(required, RawDate(0, 0, 0)) == ZERO_DAY == -719529
    assert to_avro(required, "0000-00-00") == ZERO_DAY
    assert to_avro(required, RawDate(2020, 0, 15)) == zero_day(2020, 0, 15) == ZERO_DAY - 840335
    stamp = make_spec("t", "timestamp", nullable=False)
    assert to_avro(stamp, RawTimestamp(0, 0)) == ZERO_DAY * 86_400_000_000
    assert to_avro(make_spec("t", "timestamp"), RawTimestamp(0, 0)) is None
    assert to_avro(stamp, RawTimestamp(1, 500)) == 1_000_500
    dt = make_spec("t", "datetime", nullable=False)
    assert to_avro(dt, RawDateTime(2020, 0, 15, 10, 11, 12, 500_000)) == \
        to_avro(dt, "2020-00-15 10:11:12.5") == \
        zero_day(2020, 0, 15) * 86_400_000_000 + 36_672_500_000
    assert key_text(make_spec("d", "date"), ZERO_DAY) == "-0001-12-31"


def _valid(y: int, m: int, d: int) -> bool:
    try:
        date(y if y else 4, m, d)
        return True
    except ValueError:
        return False


class _Packet:
    def __init__(self, data: bytes) -> None:
        self.stream = io.BytesIO(data)

    def read(self, n: int) -> bytes:
        return self.stream.read(n)


def _time2(micros: int, fsp: int) -> bytes:
    """MySQL's TIME2 bytes (my_time_packed_to_binary) of a signed number of microseconds."""
    sign = -1 if micros < 0 else 1
    seconds, frac = divmod(abs(micros), 1_000_000)
    hms = (seconds // 3600) << 12 | (seconds // 60 % 60) << 6 | seconds % 60
    packed = sign * ((hms << 24) + frac)
    if fsp >= 5:
        return (packed + 0x800000000000).to_bytes(6, "big")
    intpart, fraction = packed >> 24, packed % (1 << 24)
    if fsp == 0:
        return (intpart + 0x800000).to_bytes(3, "big")
    size = 1 if fsp <= 2 else 2
    unit = 10_000 if size == 1 else 100
    frac_part = fraction // unit if packed >= 0 else -((-packed % (1 << 24)) // unit)
    if frac_part < 0:
        intpart = -((-packed) >> 24) - 1
        frac_part += 1 << (8 * size)
    elif packed < 0:
        intpart = -((-packed) >> 24)
    return (intpart + 0x800000).to_bytes(3, "big") + frac_part.to_bytes(size, "big")


@pytest.mark.parametrize(("text", "fsp"), [
    ("-733:00:00.001", 3), ("-01:02:03.456789", 6), ("-00:00:00.5", 1), ("-838:59:59", 0),
    ("838:59:59.99", 2), ("-12:34:56.7891", 4), ("00:00:00.00001", 5), ("-00:00:01.10", 2)])
def test_negative_times_keep_their_fraction(text: str, fsp: int) -> None:
    sign = -1 if text.startswith("-") else 1
    h, m, s = text.lstrip("-").split(":")
    micros = sign * ((int(h) * 3600 + int(m) * 60) * 1_000_000 + round(float(s) * 1_000_000))
    raw = decoding._time2(_Packet(_time2(micros, fsp)), fsp)
    assert raw == RawTime(micros)
    assert to_avro(make_spec("t", "time", fsp=fsp), raw) == time_text(micros, fsp)
    assert time_text(micros, fsp).rstrip("0") == text.rstrip("0") or fsp == 0


def test_inet6_text_follows_mariadb() -> None:
    cases = {"::": "0" * 32, "::1": "0" * 31 + "1", "1::": "0001" + "0" * 28,
             "::ffff:1.2.3.4": "0" * 20 + "ffff01020304", "::1.2.3.4": "0" * 24 + "01020304",
             "1::2:3:4:5:6:7": "0001000000020003000400050006" + "0007",
             "1:0:0:1::1": "00010000000000010000000000000001",
             "fe80::1:0:0:0": "fe800000000000000001000000000000"}
    for text, hexed in cases.items():
        assert inet6_text(bytes.fromhex(hexed)) == text
    spec = make_spec("a", "inet6")
    assert to_avro(spec, bytes.fromhex("0001")) == "1::"  # the binlog strips trailing zeros


def test_enum_and_set_members_and_values() -> None:
    assert quoted_list("enum('a''b','c\\\\d','médium')") == ("a'b", "c\\d", "médium")
    enum = make_spec("e", "enum", members=("médium", "x"))
    assert [to_avro(enum, v) for v in (1, 2, 0, "x")] == ["médium", "x", "", "x"]
    flags = make_spec("s", "set", members=("a", "é", "日"))
    assert [to_avro(flags, v) for v in (0, 5, 7, "")] == ["", "a,日", "a,é,日", ""]
    assert to_avro(make_spec("b", "bit64"), b"\xff" * 8) == Decimal(2**64 - 1)
    assert to_avro(make_spec("b", "bool"), b"\x01") is True
    assert to_avro(make_spec("b", "fixed", width=16), b"\xab") == b"\xab" + b"\0" * 15
    assert to_avro(make_spec("g", "geometry"), b"\xe6\x10\0\0\x01") == b"\x01"
    assert to_avro(make_spec("d", "bigdecimal", scale=3), Decimal("-1.5")) == "-1.500"


def _specs(*names: str, nullable: bool = False) -> tuple:
    return tuple(make_spec(n, "long", nullable=nullable) for n in names)


def test_the_key_choice() -> None:
    specs = (make_spec("id", "long", nullable=False), make_spec("u", "fixed", width=4,
                                                                 nullable=False),
             make_spec("v", "long"))
    assert decide(None, "d.t", specs, ("id",), []).kind == "primary"
    unique = decide(None, "d.t", specs, (), [("uq", ("id",)), ("uq2", ("u",))])
    assert (unique.kind, unique.columns, unique.index, unique.synthetic) == (
        "unique", ("id",), "uq", False)
    binary = decide(None, "d.t", specs, ("u",), [])
    assert binary.synthetic and binary.row_key == ("sluice_row_id",)
    assert decide(None, "d.t", specs, (), []).kind == "row"

    class Source:
        name = "s"
        key_columns = {"d.t": ["v", "id"], "d.log_*": "changelog"}

    chosen = decide(Source(), "d.t", specs, ("id",), [])  # type: ignore[arg-type]
    assert (chosen.kind, chosen.columns, chosen.synthetic) == ("columns", ("v", "id"), True)
    assert decide(Source(), "d.log_2024", specs, (), []).kind == "changelog"  # type: ignore
    Source.key_columns = {"d.t": ["nope"]}
    with pytest.raises(ConfigError, match="no column nope"):
        decide(Source(), "d.t", specs, (), [])  # type: ignore[arg-type]
    Source.key_columns = {"d.t": 3}
    with pytest.raises(ConfigError, match="key_columns.d.t"):
        check_setting(Source())  # type: ignore[arg-type]


def test_key_columns_setting_loads(tmp_path: Path) -> None:
    path = tmp_path / "sluice.yml"
    path.write_text(json.dumps({"sources": {"shop": {"key_columns": {"shop.log": "changelog",
                                                                       "shop.t": ["a"]}}}}))
    source = load_settings(path, env={}).source("shop")
    assert dict(source.key_columns) == {"shop.log": "changelog", "shop.t": ["a"]}
    path.write_text(json.dumps({"sources": {"shop": {"key_columns": ["a"]}}}))
    with pytest.raises(ConfigError, match="sources.shop.key_columns"):
        load_settings(path, env={})


def test_full_row_identity_is_a_multiset_and_its_counts_follow_the_checkpoint() -> None:
    shape = TableShape("d", "t", _specs("a", "b", nullable=True), KeyChoice("row"))
    rows = RowCounts()
    table = TappedTable(shape, 1, Encoder(1, shape.avro()), "t", rows=rows)
    env = Envelope("mariadb", 0, None)
    row = {"a": 1, "b": None}
    inserted = changes(table, INSERT, [{"values": row}] * 3, 1, 100, env)
    keys = [c.key for c in inserted]
    assert len(set(keys)) == 3 and all(k and k.endswith(f"#{n}") for k, n in zip(
        keys, (1, 2, 3), strict=True))
    pending = rows.take_delta()
    (deleted,) = changes(table, DELETE, [{"values": row}], 1, 200, env)
    assert deleted.key == keys[2] and deleted.record["_is_deleted"]  # one copy goes
    updated = changes(table, UPDATE, [{"before_values": row, "after_values": {"a": 2, "b": 3}}],
                      1, 300, env)
    assert [c.key for c in updated][0] == keys[1] and updated[1].key.endswith("#1")
    assert [c.record["_is_deleted"] for c in updated] == [True, False]
    # the saved state moves only with acknowledged transactions
    rows.apply(pending)
    saved = rows.to_json(BinlogPosition("binlog.000001", 150))
    assert list(saved["d.t"]["counts"].values()) == [3]
    restored = RowCounts(saved)
    table.rows = restored
    (again,) = changes(table, DELETE, [{"values": row}], 1, 200, env)
    assert again.key == keys[2]  # a restart from the checkpoint replays the same keys


def test_changelog_tables_keep_every_change_as_a_row() -> None:
    shape = TableShape("d", "t", _specs("a", nullable=True), KeyChoice("changelog"))
    table = TappedTable(shape, 1, Encoder(1, shape.avro()), "t")
    env = Envelope("mariadb", 0, None)
    out = changes(table, UPDATE, [{"before_values": {"a": 1}, "after_values": {"a": 2}}], 1,
                  100, env)
    out += changes(table, DELETE, [{"values": {"a": 2}}], 1, 200, env)
    assert [(c.record["sluice_op"], c.record["a"], c.record["_is_deleted"]) for c in out] == [
        ("update", 2, False), ("delete", 2, False)]
    assert len({c.key for c in out}) == 2


def test_registry_refuses_a_changed_key(tmp_path: Path) -> None:
    registry = Registry(tmp_path / "d.t")
    specs = _specs("a", "b")
    assert registry.register(TableShape("d", "t", specs, KeyChoice("row"))) == 1
    with pytest.raises(IncompatibleSchemaChange, match="key changed from full-row identity"):
        registry.register(TableShape("d", "t", specs, KeyChoice("primary", ("a",))))
    assert registry.register(TableShape("d", "t", specs, KeyChoice("row", why="again"))) == 1


def test_key_text_is_what_the_decoder_puts_in_row_key() -> None:
    """The Kafka key equals the ``_row_key`` the ingestion builds (Arrow's cast to string)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from python_ingest.changelog.decode import arrow_type

    cases = [("date", "date", [ZERO_DAY, zero_day(2020, 0, 15), 0, 2932896]),
             ("datetime", "timestamp", [ZERO_DAY * 86_400_000_000 + 1, 0, 1709210096123456]),
             ("decimal", "decimal(10,3)", [Decimal("-1.500"), Decimal("0.000")]),
             ("ulong", "decimal(20,0)", [Decimal(2**64 - 1)]), ("bool", "boolean", [True]),
             ("long", "bigint", [-(2**63), 7]), ("time", "string", ["-733:00:00.001"])]
    for kind, spark, values in cases:
        spec = make_spec("k", kind, precision=10, scale=3)
        typ = arrow_type(spark)
        array = pa.array(values, pa.int32() if kind == "date" else pa.int64()
                         if kind == "datetime" else typ).cast(typ)
        assert pc.cast(array, pa.string()).to_pylist() == [key_text(spec, v) for v in values]
