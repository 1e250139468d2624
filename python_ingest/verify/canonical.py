"""One canonical text per value, computed the same way in MariaDB/MySQL SQL and in Spark SQL.

`sluice verify` never moves rows to compare them: each side hashes the canonical text of its
rows where the rows live. The two sides agree only if every type renders identically:

=====================================  =========================================================
source type                            canonical text (both sides)
=====================================  =========================================================
integers, YEAR, BIGINT UNSIGNED, BIT   the integer in decimal (BIT, BIT(1) too: unsigned value)
DECIMAL(p, s)                          the unscaled integer (value * 10^s) in decimal
FLOAT, DOUBLE                          rounded to 6 decimal places, fixed point
DATE                                   YYYY-MM-DD (zero dates: NULL, or their digits if NOT NULL)
DATETIME, TIMESTAMP                    YYYY-MM-DD HH:MM:SS.ffffff in UTC (zero dates: as DATE)
TIME                                   [-]HH:MM:SS[.f...] as the server prints it
CHAR/VARCHAR/TEXT, ENUM, JSON          the text (UTF-8)
SET                                    the members, comma-separated (empty set: NULL)
BINARY, VARBINARY, BLOB               hex, upper case
spatial types                          hex of the WKB (the lake holds WKB, without the SRID)
NULL                                   \\N (a value never renders as that)
=====================================  =========================================================

Limits (docs/verify.md): FLOAT/DOUBLE differences below 1e-6 are not seen; a text column whose
collation treats two different strings as equal still compares them by their bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

INTEGER_TYPES = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year"}
BYTE_TYPES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "geometry",
              "point", "linestring", "polygon", "multipoint", "multilinestring",
              "multipolygon", "geometrycollection"}
FLOAT_DIGITS = 6


@dataclass(frozen=True)
class Column:
    """A column both sides hold: its name, source type and lake (Spark) type."""

    name: str
    data_type: str  # information_schema DATA_TYPE, lower case
    scale: int  # DECIMAL scale (0 otherwise)
    lake_type: str  # Spark simpleString of the lake column
    nullable: bool = True  # the source column allows NULL (zero dates land as NULL then)

    def source_sql(self) -> str:
        """The canonical text of this column in MariaDB/MySQL SQL (NULL for NULL)."""
        c = f"`{self.name.replace('`', '``')}`"
        t = self.data_type
        if t in INTEGER_TYPES:
            return f"CAST({c} AS CHAR)"
        if t == "bit":
            return f"CAST({c} + 0 AS CHAR)"
        if t in ("decimal", "numeric"):
            return f"CAST({c} * 1{'0' * self.scale} AS DECIMAL(65, 0))"
        if t in ("float", "double", "real"):
            return f"CAST(ROUND({c}, {FLOAT_DIGITS}) AS DECIMAL(65, {FLOAT_DIGITS}))"
        if t in ("date", "datetime", "timestamp"):
            text = f"DATE_FORMAT({c}, '{'%Y-%m-%d' if t == 'date' else '%Y-%m-%d %H:%i:%s.%f'}')"
            if not self.nullable:  # a zero date lands as a date below 0001-01-01 that keeps
                return text        # its digits (docs/types.md): compare the digits
            return f"IF(YEAR({c}) = 0 OR MONTH({c}) = 0 OR DAY({c}) = 0, NULL, {text})"
        if t == "time":
            return f"CAST({c} AS CHAR)"
        if t == "set":
            return f"NULLIF(CAST({c} AS CHAR), '')"
        if t in BYTE_TYPES - {"binary", "varbinary", "tinyblob", "blob", "mediumblob",
                              "longblob"}:
            return f"HEX(ST_AsWKB({c}))"  # spatial: the lake holds WKB (no SRID)
        if t in BYTE_TYPES:
            return f"HEX({c})"
        return f"CONVERT({c} USING utf8mb4)"  # text, enum, json and anything else textual

    def lake_sql(self) -> str:
        """The canonical text of this column in Spark SQL, from the lake's column type."""
        c = f"`{self.name.replace('`', '``')}`"
        t, lake = self.data_type, self.lake_type
        if t == "bit" and lake == "binary":
            return f"conv(hex({c}), 16, 10)"
        if t == "bit" and lake == "boolean":
            return f"cast(cast({c} as int) as string)"
        if t in ("decimal", "numeric") and lake.startswith("decimal"):
            return f"cast(cast({c} * 1{'0' * self.scale} as decimal(38, 0)) as string)"
        if t in ("float", "double", "real"):
            return f"cast(cast(round(cast({c} as double), {FLOAT_DIGITS}) as decimal(38, " \
                   f"{FLOAT_DIGITS})) as string)"
        if lake == "date":
            return _zero_or(f"unix_date({c})", f"date_format({c}, 'yyyy-MM-dd')", "")
        if lake == "timestamp":
            return _zero_or(f"unix_date(cast({c} as date))",
                            f"date_format({c}, 'yyyy-MM-dd HH:mm:ss.SSSSSS')",
                            f"date_format({c}, ' HH:mm:ss.SSSSSS')")
        if lake == "binary":
            return f"hex({c})"
        if t == "set":
            return f"nullif(cast({c} as string), '')"
        return f"cast({c} as string)"


# The tap lands a zero or partial-zero date of a NOT NULL column on day
# -719529 - (Y*416 + M*32 + D) (docs/types.md): below every valid date, one-to-one.
ZERO_DAY = -719529


def _zero_or(day: str, text: str, time_text: str) -> str:
    """Spark SQL: the source's digits for a zero-date day (``0000-00-00``), else ``text``."""
    n = f"({ZERO_DAY} - {day})"
    digits = f"format_string('%04d-%02d-%02d', {n} div 416, ({n} % 416) div 32, {n} % 32)"
    zero = f"concat({digits}, {time_text})" if time_text else digits
    return f"case when {day} <= {ZERO_DAY} then {zero} else {text} end"


NULL_SQL = "'\\\\N'"  # the SQL literal '\\N' (MariaDB and Spark read a backslash escape)
PG_NULL_SQL = "'\\N'"  # PostgreSQL (standard_conforming_strings): the same text, \N


def row_text(parts: list[str], dialect: str) -> str:
    """SQL for the canonical text of a row: its columns' texts, NULL as \\N, joined by US."""
    if dialect == "postgres":
        values = ", ".join(f"COALESCE({p}, {PG_NULL_SQL})" for p in parts)
        return f"concat_ws(chr(31), {values})"
    values = ", ".join(f"COALESCE({p}, {NULL_SQL})" for p in parts)
    if dialect == "mysql":
        return f"CONCAT_WS(CHAR(31 USING utf8mb4), {values})"
    return f"concat_ws(char(31), {values})"


def hash_sql(text: str, dialect: str, function: str = "crc32") -> str:
    """The row's 32-bit hash: CRC32 of its canonical text (UTF-8 bytes on both sides).

    Per range both the sum and the XOR of the hashes are compared (with the row count): a
    changed row goes unseen only if its new CRC32 equals the old one and both statistics
    cancel. CRC32 costs a fraction of MD5 on both engines (docs/verify.md, Cost).
    PostgreSQL has no CRC32 (nor any hash Spark shares but MD5): against it both sides use
    the first 32 bits of MD5 (``function="md5"``)."""
    if function == "md5":
        if dialect == "postgres":
            return f"('x' || substr(md5({text}), 1, 8))::bit(32)::bigint"
        return f"cast(conv(substr(md5(cast({text} as binary)), 1, 8), 16, 10) as bigint)"
    if dialect == "mysql":
        return f"CRC32({text})"
    return f"crc32(cast({text} as binary))"


def bucket_sql(text: str, buckets: int, dialect: str, function: str = "crc32") -> str:
    """The range (0..buckets-1) a key's canonical text falls in: its hash mod buckets."""
    if dialect == "mysql":
        return f"MOD({hash_sql(text, dialect, function)}, {buckets})"
    if dialect == "postgres":
        return f"mod({hash_sql(text, dialect, function)}, {buckets})"
    return f"pmod({hash_sql(text, dialect, function)}, {buckets})"
