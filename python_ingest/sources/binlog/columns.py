"""MySQL/MariaDB column types → Avro types, and column values → Avro values, exactly.

A column's shape comes either from the binlog (the table map event, complete only with
``binlog_row_metadata=FULL``) or from ``information_schema`` (bootstrap, ``--print-jobs``);
both give the same spec, or the tap and the bootstrap would register different schema versions.
Values come from binlog row images (``decoding.read_value``: bytes, raw temporal parts, ENUM
indexes, SET masks) or from the bootstrap's SELECT (``select_sql``: temporal values as text,
FLOAT widened exactly) and convert to the same Avro value. docs/types.md is the user's table of
this module; the kinds (ColumnSpec and the kinds: tap/columns.py):

=========================================  ==============================  ==========
MySQL/MariaDB type                         Avro type (lake type)           kind
=========================================  ==============================  ==========
TINYINT..BIGINT, YEAR                      long (bigint)                   long
BIGINT UNSIGNED                            decimal(20,0)                   ulong
FLOAT / DOUBLE                             float / double (bit exact)      float/double
DECIMAL(p,s), p <= 38                      decimal(p,s)                    decimal
DECIMAL(p,s), p > 38                       string, plain, s decimals       bigdecimal
BIT(1) / BIT(2..63) / BIT(64)              boolean / long / decimal(20,0)  bool/bit/bit64
CHAR, VARCHAR, TEXT (any charset)          string (Unicode)                string
BINARY(n)                                  bytes, always n bytes           fixed
VARBINARY, BLOB                            bytes                           bytes
ENUM                                       string (member; '' = index 0)   enum
SET                                        string 'a,c' ('' = no member)   set
JSON (MariaDB: text)                       string, the server's text       string
JSON (MySQL binary)                        string (JSON text)              json
DATE                                       date                            date
DATETIME(fsp)                              timestamp-micros (UTC)          datetime
TIMESTAMP(fsp)                             timestamp-micros (instant)      timestamp
TIME(fsp)                                  string [-]HH:MM:SS[.f{fsp}]     time
GEOMETRY, POINT, ...                       bytes (WKB, SRID dropped)       geometry
UUID / INET4 / INET6 (MariaDB)             string, the server's text       uuid/inet4/inet6
=========================================  ==============================  ==========

Zero dates (and partial zeros, invalid dates) of DATE, DATETIME and TIMESTAMP: NULL when the
column is nullable, else the day ``values.zero_day(y, m, d)`` before year 0 (docs/types.md).

Every column is nullable in Avro (``["null", T]``, default null), so an added column is always
a compatible change for readers of older versions.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from python_ingest.exceptions import UnsupportedColumn
from python_ingest.sources.binlog.values import (
    RawDate,
    RawDateTime,
    RawTime,
    RawTimestamp,
    inet6_text,
    json_text,
    parse_date_text,
    quoted_list,
    time_micros,
    time_text,
    valid_date,
    zero_day,
)

# The shared vocabulary (tap/columns.py), re-exported here, its former home.
from python_ingest.sources.tap.columns import MAX_SPARK_PRECISION as MAX_SPARK_PRECISION
from python_ingest.sources.tap.columns import NATURAL_KEY_KINDS as NATURAL_KEY_KINDS
from python_ingest.sources.tap.columns import OPERATION as OPERATION
from python_ingest.sources.tap.columns import ROW_ID as ROW_ID
from python_ingest.sources.tap.columns import SYNTHETIC as SYNTHETIC
from python_ingest.sources.tap.columns import TEMPORAL as TEMPORAL
from python_ingest.sources.tap.columns import ColumnSpec as ColumnSpec
from python_ingest.sources.tap.columns import canonical as canonical
from python_ingest.sources.tap.columns import key_text as key_text
from python_ingest.sources.tap.columns import make_spec as make_spec
from python_ingest.sources.tap.columns import synthetic_spec as synthetic_spec
from python_ingest.sources.tap.values import DAY_MICROS, days_from_civil

# ---- column specs ----------------------------------------------------------------------------

# Binlog column type codes (MySQL's enum_field_types).
_INTS = {1, 2, 3, 9}  # TINY, SHORT, LONG, INT24
_LONGLONG, _FLOAT, _DOUBLE, _YEAR, _BIT, _JSON, _GEOMETRY = 8, 4, 5, 13, 16, 245, 255
_TIMESTAMPS = {7, 17}
_DATETIMES = {12, 18}
_DATES = {10, 14}
_TIMES = {11, 19}
_ENUM, _SET, _NEWDECIMAL = 247, 248, 246
_STRINGS = {15, 249, 250, 251, 252, 253, 254}
_MARIADB_BINARY_TYPES = {"uuid": 16, "inet6": 16, "inet4": 4}


def _decimal_spec(name: str, precision: int, scale: int) -> ColumnSpec:
    if precision > MAX_SPARK_PRECISION:
        return make_spec(name, "bigdecimal", scale=scale)
    return make_spec(name, "decimal", precision, scale)


def _bit_spec(name: str, bits: int) -> ColumnSpec:
    return make_spec(name, "bool" if bits == 1 else "bit64" if bits == 64 else "bit")


def from_binlog(column: Any, charsets: Any, data_type: str | None = None) -> ColumnSpec:
    spec = _from_binlog(column, charsets, data_type)
    return replace(spec, nullable=bool(getattr(column, "nullable", True)))


def _from_binlog(column: Any, charsets: Any, data_type: str | None = None) -> ColumnSpec:
    """The spec of a pymysqlreplication Column (a table map event with full metadata, read
    with ``decoding.install()``). ``charsets`` (``charsets.Charsets``) names the charset of a
    collation id and decodes ENUM/SET member names; ``data_type`` is the column's DATA_TYPE
    in information_schema when known (MariaDB's UUID/INET4/INET6 look like BINARY(n) in the
    binlog)."""
    t, name = column.type, column.name
    if name is None:
        raise UnsupportedColumn("the binlog has no column names: set binlog_row_metadata=FULL "
                                "on the server (see docs/binlog-tap.md)")
    nullable = bool(getattr(column, "nullable", True))
    if t in _INTS or t == _YEAR:
        return make_spec(name, "long")
    if t == _LONGLONG:
        return make_spec(name, "ulong" if column.unsigned else "long")
    if t == _FLOAT:
        return make_spec(name, "float")
    if t == _DOUBLE:
        return make_spec(name, "double")
    if t == _NEWDECIMAL:
        return _decimal_spec(name, column.precision, column.decimals)
    if t in _TIMESTAMPS:
        return make_spec(name, "timestamp", nullable=nullable)
    if t in _DATETIMES:
        return make_spec(name, "datetime", nullable=nullable)
    if t in _DATES:
        return make_spec(name, "date", nullable=nullable)
    if t in _TIMES:
        return make_spec(name, "time", fsp=getattr(column, "fsp", 0) or 0)
    if t in (_ENUM, _SET):
        charset = charsets.name(getattr(column, "collation_id", None))
        raw = (column.enum_values or [""])[1:] if t == _ENUM else (column.set_values or [])
        members = tuple(charsets.decode(charset, m) if isinstance(m, bytes) else str(m)
                        for m in raw)
        return make_spec(name, "enum" if t == _ENUM else "set", members=members)
    if t == _BIT:
        return _bit_spec(name, column.bits)
    if t == _JSON:
        return make_spec(name, "json")
    if t == _GEOMETRY:
        return make_spec(name, "geometry")
    if t in _STRINGS:
        charset = charsets.name(getattr(column, "collation_id", None))
        if charset != "binary":
            return make_spec(name, "string", charset=charset)
        width = getattr(column, "max_length", 0)
        if data_type in _MARIADB_BINARY_TYPES and width == _MARIADB_BINARY_TYPES[data_type]:
            return make_spec(name, data_type)
        return make_spec(name, "fixed", width=width) if t == 254 else make_spec(name, "bytes")
    raise UnsupportedColumn(f"column '{name}' has binlog type {t}, which the tap does not "
                            "support; exclude the table")


_INT_NAMES = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year"}
_TEXT_NAMES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext"}
_BYTES_NAMES = {"varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
_GEOMETRY_NAMES = {"geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
                   "multipolygon", "geometrycollection"}


def from_information_schema(row: dict[str, Any]) -> ColumnSpec:
    """The spec of a column from an ``information_schema.COLUMNS`` row."""
    spec = _from_information_schema(row)
    return replace(spec, nullable=str(row.get("IS_NULLABLE", "YES")).upper() == "YES")


def _from_information_schema(row: dict[str, Any]) -> ColumnSpec:
    name = row["COLUMN_NAME"]
    data_type = str(row["DATA_TYPE"]).lower()
    column_type = str(row["COLUMN_TYPE"]).lower()
    nullable = str(row.get("IS_NULLABLE", "YES")).upper() == "YES"
    if data_type in _INT_NAMES:
        unsigned = data_type == "bigint" and "unsigned" in column_type
        return make_spec(name, "ulong" if unsigned else "long")
    if data_type == "float":
        return make_spec(name, "float")
    if data_type in ("double", "real"):
        return make_spec(name, "double")
    if data_type in ("decimal", "numeric"):
        return _decimal_spec(name, int(row["NUMERIC_PRECISION"]), int(row["NUMERIC_SCALE"] or 0))
    if data_type in ("datetime", "timestamp", "date"):
        return make_spec(name, data_type, nullable=nullable)
    if data_type == "time":
        return make_spec(name, "time", fsp=int(row.get("DATETIME_PRECISION") or 0))
    if data_type in ("enum", "set"):
        return make_spec(name, data_type, members=quoted_list(row["COLUMN_TYPE"]))
    if data_type == "bit":
        return _bit_spec(name, int(row["NUMERIC_PRECISION"]))
    if data_type == "json":  # MySQL; MariaDB's JSON is longtext
        return make_spec(name, "json")
    if data_type in _GEOMETRY_NAMES:
        return make_spec(name, "geometry")
    if data_type in _MARIADB_BINARY_TYPES:
        return make_spec(name, data_type)
    if data_type == "binary":
        return make_spec(name, "fixed", width=int(row["CHARACTER_OCTET_LENGTH"]))
    if data_type in _BYTES_NAMES:
        return make_spec(name, "bytes")
    if data_type in _TEXT_NAMES:
        charset = str(row.get("CHARACTER_SET_NAME") or "binary")
        if charset == "binary":
            return make_spec(name, "bytes")
        return make_spec(name, "string", charset=charset)
    raise UnsupportedColumn(f"column '{name}' has type {column_type}, which the tap does not "
                            "support; exclude the table")


def select_sql(spec: ColumnSpec, quoted: str) -> str:
    """The bootstrap's SELECT expression of a column: its value in a form ``to_avro`` maps to
    the same Avro value as the binlog's (FLOAT widened exactly, temporal values as text)."""
    if spec.kind == "float":
        return f"CAST({quoted} AS DOUBLE) AS {quoted}"
    if spec.kind in (*TEMPORAL, "time"):
        return f"CAST({quoted} AS CHAR) AS {quoted}"
    return quoted


# ---- values ----------------------------------------------------------------------------------

_PYTHON_CODECS = {"utf8mb4": "utf-8", "utf8mb3": "utf-8", "utf8": "utf-8", "ascii": "ascii",
                  "ucs2": "utf-16-be", "utf16": "utf-16-be", "utf16le": "utf-16-le",
                  "utf32": "utf-32-be"}


def decode_text(charset: str, raw: bytes) -> str:
    """Text of ``raw`` in a Unicode charset (or ascii); others need the server
    (``charsets.Charsets``)."""
    codec = _PYTHON_CODECS.get(charset)
    if codec is None:
        raise UnsupportedColumn(f"no converter for charset {charset}")
    return raw.decode(codec)


TextDecoder = Callable[[str, bytes], str]


def _temporal(spec: ColumnSpec, y: int, m: int, d: int, micros_of_day: int) -> int | None:
    """Days (date) or micros (datetime/timestamp) of a date, or the zero-date policy."""
    if valid_date(y, m, d):
        day = days_from_civil(y, m, d)
    elif spec.nullable:
        return None
    else:
        day = zero_day(y, m, d)
    return day if spec.kind == "date" else day * DAY_MICROS + micros_of_day


def _temporal_text(spec: ColumnSpec, text: str) -> int | None:
    y, m, d, micros = parse_date_text(text)
    return _temporal(spec, y, m, d, micros)


def _bits(value: Any) -> int:
    if isinstance(value, bytes | bytearray):
        return int.from_bytes(value, "big")
    return int(value, 2) if isinstance(value, str) else int(value)


def to_avro(spec: ColumnSpec, value: Any, text: TextDecoder = decode_text) -> Any:
    """Convert a binlog or SELECT value of ``spec``'s column to its Avro value (dates as days,
    DATETIME/TIMESTAMP as microseconds since the epoch, UTC). ``text`` decodes the bytes of a
    text column in its charset."""
    if value is None:
        return None
    kind = spec.kind
    if kind == "long":
        return int(value)
    if kind in ("string", "enum", "set") and isinstance(value, bytes | bytearray):
        return text(spec.charset, bytes(value))
    if kind == "string":
        return str(value)
    if kind in ("double", "float"):
        return float(value)
    if kind == "decimal":
        return value if isinstance(value, Decimal) else Decimal(str(value))
    if kind == "ulong":
        return Decimal(int(value))
    if kind == "bigdecimal":
        return format(Decimal(str(value)), f".{spec.scale}f")
    if kind in ("bytes", "geometry", "fixed"):
        raw = bytes(value) if not isinstance(value, str) else value.encode("utf-8")
        if kind == "geometry":
            return raw[4:]  # MariaDB/MySQL: 4 bytes SRID, then WKB
        return raw.ljust(spec.width, b"\0") if kind == "fixed" else raw
    if kind == "enum":
        if isinstance(value, int):
            return spec.members[value - 1] if 1 <= value <= len(spec.members) else ""
        return str(value)
    if kind == "set":
        if isinstance(value, int):
            return ",".join(m for i, m in enumerate(spec.members) if value >> i & 1)
        if isinstance(value, set | frozenset):
            return ",".join(m for m in spec.members if m in value)
        return str(value)
    if kind in TEMPORAL:
        if isinstance(value, RawTimestamp):
            if value.seconds == 0 and value.micro == 0:
                return _temporal(spec, 0, 0, 0, 0)
            return value.seconds * 1_000_000 + value.micro
        if isinstance(value, RawDate):
            return _temporal(spec, value.year, value.month, value.day, 0)
        if isinstance(value, RawDateTime):
            micros = ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000
            return _temporal(spec, value.year, value.month, value.day, micros + value.micro)
        if isinstance(value, datetime):
            return (days_from_civil(value.year, value.month, value.day) * DAY_MICROS
                    + ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000
                    + value.microsecond)
        if isinstance(value, date):
            return days_from_civil(value.year, value.month, value.day)
        return _temporal_text(spec, value.decode() if isinstance(value, bytes) else str(value))
    if kind == "time":
        if isinstance(value, RawTime):
            return time_text(value.micros, spec.fsp)
        if isinstance(value, timedelta):
            return time_text(value // timedelta(microseconds=1), spec.fsp)
        return time_text(time_micros(str(value)), spec.fsp)
    if kind == "bool":
        return _bits(value) != 0
    if kind == "bit":
        return _bits(value)
    if kind == "bit64":
        return Decimal(_bits(value))
    if kind == "json":
        return value if isinstance(value, str) else json_text(value)
    if kind in ("uuid", "inet4", "inet6"):
        if isinstance(value, str):
            return value
        raw = bytes(value).ljust(_MARIADB_BINARY_TYPES[kind], b"\0")  # the binlog strips 0x00
        if kind == "uuid":
            return str(uuid.UUID(bytes=raw))
        return ".".join(str(b) for b in raw) if kind == "inet4" else inet6_text(raw)
    raise UnsupportedColumn(f"column '{spec.name}': unknown kind {kind}")


