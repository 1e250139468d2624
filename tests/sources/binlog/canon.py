"""The lake and the MariaDB table in one canonical text form, computed independently.

The source side asks the server for each value's text (``CAST(... AS CHAR)``, ``HEX``,
``ST_AsBinary``, ``CONVERT(... USING utf8mb4)``) and applies the documented mapping of
docs/types.md to it here; the lake side asks Spark (``hex``, ``unix_date``, ``unix_micros``).
Nothing of the tap's own conversion code is used, so the comparison checks it.

Canonical forms: bytes as upper-case hex; DATE as days since 1970-01-01 and DATETIME/TIMESTAMP
as microseconds since 1970-01-01 00:00:00 UTC (zero dates: NULL in a nullable column, else
``-719529 - (y*416 + m*32 + d)`` days, docs/types.md); FLOAT and DOUBLE as their IEEE bytes;
DECIMAL as plain text with its scale; BIT(1) true/false, other BITs their unsigned value; text
as Unicode.
"""

from __future__ import annotations

import struct
from collections import Counter
from datetime import date
from decimal import Decimal
from typing import Any

ZERO_DAY = -719529  # -0001-12-31, the day of the zero date in a NOT NULL column
_EPOCH = date(1970, 1, 1)
BYTE_TYPES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
GEOMETRY_TYPES = {"geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
                  "multipolygon", "geometrycollection"}
SYNTHETIC = ("sluice_row_id", "sluice_op")


def columns(env: Any, table: str) -> list[dict[str, Any]]:
    import pymysql

    with env.server.root(env.database) as conn, conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE FROM "
                    "information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s "
                    "ORDER BY ORDINAL_POSITION", (env.database, table))
        return list(cur.fetchall())


def source_sql(column: dict[str, Any]) -> str:
    c = f"`{column['COLUMN_NAME']}`"
    t = column["DATA_TYPE"].lower()
    if t == "bit":
        if column["COLUMN_TYPE"].lower() == "bit(1)":
            return f"IF({c} IS NULL, NULL, IF({c} = 1, 'true', 'false'))"
        return f"CAST({c} + 0 AS CHAR)"
    if t == "year":
        return f"CAST({c} + 0 AS CHAR)"
    if t in ("float", "real") or t == "double":
        return f"CAST({c} AS DOUBLE)"
    if t in BYTE_TYPES:
        return f"HEX({c})"
    if t in GEOMETRY_TYPES:
        return f"HEX(ST_AsBinary({c}))"
    if t in ("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"):
        return f"CONVERT({c} USING utf8mb4)"
    return f"CAST({c} AS CHAR)"


def _days(y: int, m: int, d: int) -> int | None:
    try:
        return (date(y, m, d) - _EPOCH).days
    except ValueError:
        return None


def _temporal(column: dict[str, Any], text: str) -> int | None:
    day_text, _, clock = text.partition(" ")
    y, m, d = (int(p) for p in day_text.split("-"))
    days = _days(y, m, d)
    if days is None:  # a zero, partial-zero or invalid date: docs/types.md
        if column["IS_NULLABLE"] == "YES":
            return None
        days = ZERO_DAY - (y * 416 + m * 32 + d)
    if column["DATA_TYPE"] == "date":
        return days
    hms, _, fraction = clock.partition(".")
    h, mi, s = (int(p) for p in hms.split(":"))
    return (days * 86400 + h * 3600 + mi * 60 + s) * 1_000_000 + int(fraction.ljust(6, "0"))


def source_value(column: dict[str, Any], value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    t = column["DATA_TYPE"].lower()
    if t in ("date", "datetime", "timestamp"):
        return _temporal(column, str(value))
    if t == "float":
        return struct.pack("<f", float(value)).hex()
    if t in ("double", "real"):
        return struct.pack("<d", float(value)).hex()
    return str(value)


def lake_sql(name: str, spark_type: str) -> str:
    c = f"`{name}`"
    if spark_type == "binary":
        return f"upper(hex({c}))"
    if spark_type == "date":
        return f"unix_date({c})"
    if spark_type == "timestamp":
        return f"unix_micros({c})"
    if spark_type in ("bigint", "boolean", "int", "string"):
        return f"cast({c} as string)"
    return c  # decimal, float, double: converted in Python


def lake_value(spark_type: str, value: Any) -> Any:
    if value is None:
        return None
    if spark_type == "float":
        return struct.pack("<f", value).hex()
    if spark_type == "double":
        return struct.pack("<d", value).hex()
    if isinstance(value, Decimal):
        return format(value, "f")
    return value


def source_rows(env: Any, table: str) -> list[dict[str, Any]]:
    """The MariaDB table's rows, each value in canonical form."""
    cols = columns(env, table)
    exprs = ", ".join(f"{source_sql(c)} AS `{c['COLUMN_NAME']}`" for c in cols)
    with env.server.root(env.database) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {exprs} FROM `{table}`")
        rows = cur.fetchall()
    return [{c["COLUMN_NAME"]: source_value(c, v) for c, v in zip(cols, row, strict=True)}
            for row in rows]


def lake_rows(spark: Any, lake_table: str, names: list[str],
              extra: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The lake table's rows (``names`` and ``extra`` columns), in canonical form."""
    frame = spark.table(lake_table)
    types = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
    wanted = [*names, *extra]
    frame = frame.selectExpr(*[f"{lake_sql(n, types[n])} as `{n}`" for n in wanted])
    return [{n: lake_value(types[n], r[n]) for n in wanted} for r in frame.collect()]


def as_multiset(rows: list[dict[str, Any]], names: list[str]) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r[n] for n in names) for r in rows)


def differences(expected: list[dict[str, Any]], actual: list[dict[str, Any]],
                names: list[str]) -> str:
    """'' when equal as multisets of rows; else the rows only one side has."""
    want, got = as_multiset(expected, names), as_multiset(actual, names)
    if want == got:
        return ""
    missing = list((want - got).elements())[:3]
    extra = list((got - want).elements())[:3]
    lines = [f"{sum(want.values())} source rows, {sum(got.values())} lake rows"]
    for label, rows in (("only in the source", missing), ("only in the lake", extra)):
        for row in rows:
            lines.append(f"  {label}: " + ", ".join(f"{n}={v!r}" for n, v in zip(names, row,
                                                                                 strict=True)))
    return "\n".join(lines)
