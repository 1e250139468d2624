"""MySQL/MariaDB column types → Avro types, and column values → Avro values.

A column's shape comes either from the binlog (the table map event, complete only with
``binlog_row_metadata=FULL``) or from ``information_schema`` (bootstrap); both must give the
same Avro type, or the tap and the bootstrap would register different schema versions for the
same table. Values likewise come from binlog row images or from SELECT results and convert to
the same Avro value:

=========================================  ======================================  ============
MySQL type                                 Avro type                               kind
=========================================  ======================================  ============
TINYINT..BIGINT, YEAR                      long                                    long
BIGINT UNSIGNED                            decimal(20, 0)                          ulong
FLOAT / DOUBLE                             float / double                          float/double
DECIMAL(p, s), p <= 38                     decimal(p, s) (bytes)                   decimal
DECIMAL(p, s), p > 38                      string                                  bigdecimal
DATETIME(n), TIMESTAMP(n)                  timestamp-micros (DATETIME read as UTC)  timestamp
DATE                                       date                                    date
TIME(n)                                    string ``[-]HH:MM:SS[.fff]``            time
CHAR/VARCHAR/TEXT, ENUM, MariaDB JSON      string                                  string
MySQL JSON                                 string (JSON text)                      json
SET                                        string ``a,c``                          set
BIT(n)                                     long                                    bit
BINARY/VARBINARY/BLOB, GEOMETRY            bytes                                   bytes
=========================================  ======================================  ============

Every column is nullable in Avro (``["null", T]``, default null), so an added column is always
a compatible change for readers of older versions.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from python_ingest.exceptions import UnsupportedColumn

MAX_SPARK_PRECISION = 38
_AVRO_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")

# Binlog column type codes (MySQL's enum_field_types).
_INTS = {1, 2, 3, 8, 9}  # TINY, SHORT, LONG, LONGLONG, INT24
_FLOAT, _DOUBLE, _YEAR, _BIT, _JSON, _GEOMETRY = 4, 5, 13, 16, 245, 255
_DECIMALS = {0, 246}
_TIMESTAMPS = {7, 12, 17, 18}  # TIMESTAMP, DATETIME, TIMESTAMP2, DATETIME2
_DATES = {10, 14}
_TIMES = {11, 19}
_ENUM, _SET = 247, 248
_STRINGS = {15, 249, 250, 251, 252, 253, 254}

_INT_NAMES = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint"}
_TEXT_NAMES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum",
               "binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}


@dataclass(frozen=True)
class ColumnSpec:
    """One column: its name, how its values convert, and its Avro type."""

    name: str
    kind: str
    avro: Any
    fsp: int = 0
    set_values: tuple[str, ...] = ()

    def field(self) -> dict[str, Any]:
        return {"name": self.name, "type": ["null", self.avro], "default": None}


def _decimal(precision: int, scale: int) -> dict[str, Any]:
    return {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}


def make_spec(name: str, kind: str, precision: int = 0, scale: int = 0, fsp: int = 0,
          set_values: tuple[str, ...] = ()) -> ColumnSpec:
    if not _AVRO_NAME.match(name):
        raise UnsupportedColumn(
            f"column '{name}' is not a valid changelog column name (letters, digits and "
            "underscores, not starting with '_', which sluice reserves for its own columns); "
            "rename it or exclude the table")
    avro: Any = {
        "long": "long", "bit": "long", "float": "float", "double": "double",
        "ulong": _decimal(20, 0), "bigdecimal": "string", "time": "string", "string": "string",
        "json": "string", "set": "string", "bytes": "bytes",
        "timestamp": {"type": "long", "logicalType": "timestamp-micros"},
        "date": {"type": "int", "logicalType": "date"},
    }.get(kind)
    if kind == "decimal":
        avro = _decimal(precision, scale)
    return ColumnSpec(name, kind, avro, fsp, set_values)


def from_binlog(column: Any) -> ColumnSpec:
    """The spec of a pymysqlreplication Column (from a table map event with full metadata)."""
    t, name = column.type, column.name
    if name is None:
        raise UnsupportedColumn("the binlog has no column names: set binlog_row_metadata=FULL "
                                "on the server (see docs/binlog-tap.md)")
    if t in _INTS or t == _YEAR:
        return make_spec(name, "ulong" if t == 8 and column.unsigned else "long")
    if t == _FLOAT:
        return make_spec(name, "float")
    if t == _DOUBLE:
        return make_spec(name, "double")
    if t in _DECIMALS:
        precision, scale = column.precision, column.decimals
        if precision > MAX_SPARK_PRECISION:
            return make_spec(name, "bigdecimal")
        return make_spec(name, "decimal", precision, scale)
    if t in _TIMESTAMPS:
        return make_spec(name, "timestamp")
    if t in _DATES:
        return make_spec(name, "date")
    if t in _TIMES:
        return make_spec(name, "time", fsp=getattr(column, "fsp", 0) or 0)
    if t == _ENUM:
        return make_spec(name, "string")
    if t == _SET:
        return make_spec(name, "set", set_values=tuple(column.set_values or ()))
    if t == _BIT:
        return make_spec(name, "bit")
    if t == _JSON:
        return make_spec(name, "json")
    if t == _GEOMETRY:
        return make_spec(name, "bytes")
    if t in _STRINGS:
        binary = column.character_set_name in (None, "binary")
        return make_spec(name, "bytes" if binary else "string")
    raise UnsupportedColumn(f"column '{name}' has binlog type {t}, which the tap does not "
                            "support; exclude the table")


def _quoted_list(column_type: str) -> tuple[str, ...]:
    """The values of ``enum('a','b')`` / ``set('a','b')`` from information_schema."""
    inner = column_type[column_type.index("(") + 1: column_type.rindex(")")]
    return tuple(v.replace("''", "'") for v in re.findall(r"'((?:[^']|'')*)'", inner))


def from_information_schema(row: dict[str, Any]) -> ColumnSpec:
    """The spec of a column from an ``information_schema.COLUMNS`` row."""
    name = row["COLUMN_NAME"]
    data_type = str(row["DATA_TYPE"]).lower()
    column_type = str(row["COLUMN_TYPE"]).lower()
    if data_type in _INT_NAMES or data_type == "year":
        unsigned = data_type == "bigint" and "unsigned" in column_type
        return make_spec(name, "ulong" if unsigned else "long")
    if data_type == "float":
        return make_spec(name, "float")
    if data_type in ("double", "real"):
        return make_spec(name, "double")
    if data_type in ("decimal", "numeric"):
        precision, scale = int(row["NUMERIC_PRECISION"]), int(row["NUMERIC_SCALE"] or 0)
        if precision > MAX_SPARK_PRECISION:
            return make_spec(name, "bigdecimal")
        return make_spec(name, "decimal", precision, scale)
    if data_type in ("datetime", "timestamp"):
        return make_spec(name, "timestamp")
    if data_type == "date":
        return make_spec(name, "date")
    if data_type == "time":
        return make_spec(name, "time", fsp=int(row.get("DATETIME_PRECISION") or 0))
    if data_type == "set":
        return make_spec(name, "set", set_values=_quoted_list(row["COLUMN_TYPE"]))
    if data_type == "bit":
        return make_spec(name, "bit")
    if data_type == "json":
        return make_spec(name, "json")
    if data_type in ("geometry", "point", "linestring", "polygon", "multipoint",
                     "multilinestring", "multipolygon", "geometrycollection"):
        return make_spec(name, "bytes")
    if data_type in _TEXT_NAMES:
        binary = row.get("CHARACTER_SET_NAME") in (None, "binary")
        return make_spec(name, "bytes" if binary else "string")
    raise UnsupportedColumn(f"column '{name}' has type {column_type}, which the tap does not "
                            "support; exclude the table")


def _time_text(value: timedelta, fsp: int) -> str:
    micros = value // timedelta(microseconds=1)
    sign = "-" if micros < 0 else ""
    micros = abs(micros)
    seconds, fraction = divmod(micros, 1_000_000)
    hours, rest = divmod(seconds, 3600)
    text = f"{sign}{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
    return text + (f".{fraction:06d}"[: fsp + 1] if fsp else "")


def to_avro(spec: ColumnSpec, value: Any) -> Any:
    """Convert a binlog or SELECT value of ``spec``'s column to its Avro value."""
    if value is None:
        return None
    kind = spec.kind
    if kind in ("long", "string", "double", "float", "bytes"):
        if kind == "bytes" and isinstance(value, str):
            return value.encode("utf-8")
        if kind == "string" and isinstance(value, bytes):
            return value.decode("utf-8")
        return value
    if kind == "decimal":
        return value if isinstance(value, Decimal) else Decimal(str(value))
    if kind == "ulong":
        return Decimal(int(value))
    if kind == "bigdecimal":
        return str(value)
    if kind == "timestamp":
        if isinstance(value, str):  # SELECT of a zero date ('0000-00-00 ...'): the binlog says null
            return None
        return value
    if kind == "date":
        return value if isinstance(value, date) else None
    if kind == "time":
        return _time_text(value, spec.fsp) if isinstance(value, timedelta) else str(value)
    if kind == "set":
        if isinstance(value, str):
            return value or None
        return ",".join(v for v in spec.set_values if v in value) or None
    if kind == "bit":
        if isinstance(value, bytes):
            return int.from_bytes(value, "big")
        return int(value, 2)
    if kind == "json":
        return value if isinstance(value, str) else json.dumps(value)
    raise UnsupportedColumn(f"column '{spec.name}': unknown kind {kind}")


def key_text(value: Any) -> str:
    """A key column's value as the changelog decoder renders it in ``_row_key``."""
    if isinstance(value, datetime) and value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return str(value)
