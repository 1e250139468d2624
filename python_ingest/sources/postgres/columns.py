"""PostgreSQL column types → Avro types, and their text values → Avro values, exactly.

pgoutput sends every value in its text form (the type's output function) and the snapshot
selects every column ``::text``, under the same session settings (server.SESSION), so one
converter per column serves both and the tap and the snapshot publish equal values.
docs/types.md has the user's table; the kinds (``ColumnSpec.kind``, tap/columns.py: the
binlog tap's names where the meaning is the same, so keys.py and registry.py work unchanged):

=========================================  ============================  =========
PostgreSQL type                            Avro type (lake type)         kind
=========================================  ============================  =========
smallint, integer, bigint, oid             long (bigint)                 long
real / double precision (NaN, ±Infinity)   float / double                float/double
numeric(p,s), p <= 38, 0 <= s <= p         decimal(p,s)                  decimal
numeric(p,s), p < s <= 38 (PostgreSQL 15)  decimal(s,s)                  decimal
numeric, numeric(p or s > 38, or s < 0)    string, the exact text        bigdecimal
money                                      decimal(19,2)                 decimal
boolean                                    boolean                       bool
bytea                                      bytes                         bytes
date                                       date                          date
timestamp                                  timestamp-micros (as UTC)     datetime
timestamptz                                timestamp-micros (instant)    timestamp
json, jsonb                                string, the server's text     json
uuid                                       string                        uuid
text, varchar, char(n) (padded), name,     string, the server's text     string
time, timetz, interval (ISO 8601), inet,
cidr, macaddr, bit, varbit, enums,
arrays, xml, ranges, geometric, others
=========================================  ============================  =========

Domains take their base type's mapping. Dates and timestamps: BC dates are proleptic Gregorian
(as PostgreSQL's own), ``infinity`` lands as 9999-12-31 (23:59:59.999999) and ``-infinity``
as 0001-01-01 (00:00:00). A numeric NaN or ±Infinity in a decimal(p,s) column cannot be a
decimal: the value lands as null and an error record says so (docs/binlog-tap.md, "Values that
cannot be published").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from python_ingest.exceptions import UnsupportedColumn
from python_ingest.sources.tap.columns import (
    MAX_SPARK_PRECISION,
    ColumnSpec,
    make_spec,
)
from python_ingest.sources.tap.values import DAY_MICROS, days_from_civil

Converter = Callable[[str], Any]

_LONG = {"int2", "int4", "int8", "oid", "xid", "cid"}
_MAX_DAY = days_from_civil(9999, 12, 31)
_MIN_DAY = days_from_civil(1, 1, 1)
_EPOCH = datetime(1970, 1, 1)
_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)


# a base type's kind where its name alone decides it (numeric, money and arrays apart; any
# other type travels as its text)
_KINDS = {"float4": "float", "float8": "double", "bool": "bool", "bytea": "bytes",
          "date": "date", "timestamp": "datetime", "timestamptz": "timestamp",
          "json": "json", "jsonb": "json", "uuid": "uuid"}


@dataclass(frozen=True)
class PgType:
    """A type as pg_type describes it, domains resolved to their base type."""

    oid: int
    name: str  # typname of the base type (e.g. int4, numeric, _int4 for an array)
    category: str  # typcategory: A array, E enum, ...
    typmod: int  # the column's (or the domain's) type modifier


def spec_of(name: str, pg_type: PgType, nullable: bool = True) -> ColumnSpec:
    """The column's spec (its kind and Avro type)."""
    t = pg_type.name
    if pg_type.category == "A":
        return make_spec(name, "string", nullable=nullable)
    if t == "numeric":
        precision, scale = numeric_modifier(pg_type.typmod)
        if precision is None or scale < 0 or max(precision, scale) > MAX_SPARK_PRECISION:
            return make_spec(name, "bigdecimal", nullable=nullable)
        # numeric(3,5) (PostgreSQL 15: scale above precision) holds |x| < 10^(p-s) with s
        # digits after the point: decimal(s,s) holds every such value (Avro and Spark need
        # scale <= precision)
        return make_spec(name, "decimal", max(precision, scale), scale, nullable=nullable)
    if t == "money":
        return make_spec(name, "decimal", 19, 2, nullable=nullable)
    kind = "long" if t in _LONG else _KINDS.get(t, "string")
    return make_spec(name, kind, nullable=nullable)


def numeric_modifier(typmod: int) -> tuple[int | None, int]:
    """(precision, scale) of a numeric type modifier; (None, 0) when unconstrained."""
    if typmod < 4:
        return None, 0
    value = typmod - 4
    scale = value & 0x7FF
    if scale & 0x400:  # PostgreSQL 15: a negative scale (11 bits, two's complement)
        scale -= 0x800
    return (value >> 16) & 0xFFFF, scale


# ---- values ----------------------------------------------------------------------------------

def _bc(text: str) -> tuple[str, bool]:
    return (text[:-3], True) if text.endswith(" BC") else (text, False)


def to_date(text: str) -> int:
    if text == "infinity":
        return _MAX_DAY
    if text == "-infinity":
        return _MIN_DAY
    body, bc = _bc(text)
    year, month, day = body.split("-")
    y = 1 - int(year) if bc else int(year)
    return days_from_civil(y, int(month), int(day))


def _micros_of_day(clock: str) -> int:
    hms, _, fraction = clock.partition(".")
    h, m, s = hms.split(":")
    return ((int(h) * 60 + int(m)) * 60 + int(s)) * 1_000_000 + int(fraction.ljust(6, "0")[:6]
                                                                   or 0)


def to_timestamp(text: str) -> int:
    """Microseconds since the epoch of a timestamp's text; a timestamptz's text is in UTC
    (TimeZone=UTC: ``+00`` at the end)."""
    if text[0] != "-" and not text.endswith(("BC", "y")):  # the common case, in C
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            pass
        else:
            if moment.tzinfo is not None:
                return (moment - _EPOCH_UTC) // _MICRO
            return (moment - _EPOCH) // _MICRO
    if text == "infinity":
        return _MAX_DAY * DAY_MICROS + DAY_MICROS - 1
    if text == "-infinity":
        return _MIN_DAY * DAY_MICROS
    body, bc = _bc(text)
    day, _, clock = body.partition(" ")
    if clock.endswith("+00"):
        clock = clock[:-3]
    year, month, d = day.split("-")
    y = 1 - int(year) if bc else int(year)
    return days_from_civil(y, int(month), int(d)) * DAY_MICROS + _micros_of_day(clock)


def to_decimal(text: str) -> Decimal:
    value = Decimal(text)
    if not value.is_finite():
        raise ValueError(f"numeric {text} has no decimal value (only a numeric without "
                         "precision, landing as text, holds it)")
    return value


def to_money(text: str) -> Decimal:
    """money's text under lc_monetary=C: ``$1,234.56``, ``-$0.50``."""
    return Decimal("".join(c for c in text if c.isdigit() or c in "-."))


def to_bytes(text: str) -> bytes:
    """bytea's hex form (bytea_output=hex): ``\\x0a0b``."""
    if not text.startswith("\\x"):
        raise ValueError("bytea not in hex form (bytea_output=hex)")
    return bytes.fromhex(text[2:])


def _text(text: str) -> str:
    return text


def _bool(text: str) -> bool:
    return text == "t"


def converter(spec: ColumnSpec, pg_type: PgType) -> Converter:
    """The function from the column's text to its Avro value."""
    kind = spec.kind
    if kind == "long":
        return int
    if kind in ("float", "double"):
        return float
    if kind == "decimal":
        return to_money if pg_type.name == "money" else to_decimal
    if kind == "bool":
        return _bool
    if kind == "bytes":
        return to_bytes
    if kind == "date":
        return to_date
    if kind in ("datetime", "timestamp"):
        return to_timestamp
    if kind in ("string", "json", "uuid", "bigdecimal"):
        return _text
    raise UnsupportedColumn(f"column '{spec.name}': no converter for kind {kind}")
