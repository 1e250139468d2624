"""One canonical text per value of a PostgreSQL-fed table, in PostgreSQL SQL and in Spark SQL.

The counterpart of ``verify.canonical`` (MariaDB/MySQL) for the PostgreSQL source. The lake
holds what the tap made of each value's text (sources/postgres/columns.py, docs/types.md), so
each kind renders to a text both sides compute alike:

=====================================  =========================================================
kind (PostgreSQL type)                 canonical text (both sides)
=====================================  =========================================================
long (smallint, integer, bigint, oid)  the integer in decimal
decimal (numeric(p,s), money)          the unscaled integer (value * 10^s) in decimal
float, double (real, double)           rounded to 6 decimal places, fixed point; NaN,
                                       Infinity, -Infinity as such; beyond ±1e32 NULL
bool                                   true / false
bytes (bytea)                          hex, upper case
date                                   days since 1970-01-01 (BC dates included; infinity as
                                       9999-12-31, -infinity as 0001-01-01, as the tap lands them)
datetime, timestamp                    microseconds since 1970-01-01 00:00 UTC (infinities as
                                       the tap lands them)
string, json, uuid, bigdecimal         the type's output text (char(n) padded, jsonb
                                       normalised, arrays as literals), as pgoutput sends it
NULL                                   \\N
=====================================  =========================================================

The row hash is MD5's first 32 bits (PostgreSQL has no CRC32): ``canonical.hash_sql``.
The connection's session settings (sources/postgres/server.py SESSION) fix every output text
(ISO dates, UTC, shortest exact floats, hex bytea), as for the tap.
"""

from __future__ import annotations

from dataclasses import dataclass

from python_ingest.sources.binlog.values import DAY_MICROS, days_from_civil
from python_ingest.verify.canonical import FLOAT_DIGITS

MAX_DAY = days_from_civil(9999, 12, 31)  # where the tap lands infinity (columns.py)
MIN_DAY = days_from_civil(1, 1, 1)  # and -infinity
FLOAT_LIMIT = "1e32"  # Spark's decimal(38, 6) holds less: both sides say NULL beyond it

# The canonical text of a column ``{c}`` in PostgreSQL SQL, for the kinds one expression renders
# (decimal: numeric(p,s)::text has exactly s decimals, money 2, and the point is dropped)
SOURCE_TEXT = {
    "long": "{c}::text",
    "decimal": "replace({c}::numeric::text, '.', '')::numeric::text",
    "bool": "{c}::text",
    "bytes": "upper(encode({c}, 'hex'))",
}
# and in Spark SQL by the lake column's type, where its kind does not decide (else the cast)
LAKE_TEXT = {
    "binary": "hex({c})",
    "date": "cast(unix_date({c}) as string)",
    "timestamp": "cast(unix_micros({c}) as string)",
}


@dataclass(frozen=True)
class PgColumn:
    """A column of a PostgreSQL table and of its lake table: its name, the tap's kind
    (sources/postgres/columns.py), the PostgreSQL type's name and the lake (Spark) type."""

    name: str
    kind: str  # ColumnSpec.kind: long, decimal, float, double, bool, bytes, date, ...
    pg_type: str  # pg_type.typname of the base type (float4, money, bpchar, ...)
    lake_type: str  # Spark simpleString of the lake column

    def source_sql(self) -> str:
        """The canonical text of this column in PostgreSQL SQL (NULL for NULL)."""
        c = '"{}"'.format(self.name.replace('"', '""'))
        k = self.kind
        if k in SOURCE_TEXT:
            return SOURCE_TEXT[k].format(c=c)
        if k in ("float", "double"):
            exact = f"{c}::float8::text::numeric"  # the shortest exact text (float4 widened)
            return (f"CASE WHEN {c} = 'NaN' THEN 'NaN' WHEN {c} = 'Infinity' THEN 'Infinity' "
                    f"WHEN {c} = '-Infinity' THEN '-Infinity' WHEN abs({c}) >= {FLOAT_LIMIT} "
                    f"THEN NULL ELSE round({exact}, {FLOAT_DIGITS})::text END")
        if k == "date":
            return (f"CASE WHEN isfinite({c}) THEN ({c} - DATE '1970-01-01')::text "
                    f"WHEN {c} > DATE '1970-01-01' THEN '{MAX_DAY}' "
                    f"WHEN {c} < DATE '1970-01-01' THEN '{MIN_DAY}' END")  # NULL: none
        if k in ("datetime", "timestamp"):
            return (f"CASE WHEN isfinite({c}) THEN (extract(epoch FROM {c}) * 1000000)"
                    f"::bigint::text WHEN {c} > '1970-01-01' "
                    f"THEN '{MAX_DAY * DAY_MICROS + DAY_MICROS - 1}' "
                    f"WHEN {c} < '1970-01-01' THEN '{MIN_DAY * DAY_MICROS}' END")
        # the output function's text (concat's), not a cast: char(n)::text drops the
        # padding, inet::text adds /32
        return f"CASE WHEN {c} IS NOT NULL THEN concat({c}) END"

    def lake_sql(self) -> str:
        """The canonical text of this column in Spark SQL."""
        c = f"`{self.name.replace('`', '``')}`"
        k, lake = self.kind, self.lake_type
        if k == "decimal" and lake.startswith("decimal"):
            return (f"cast(cast(replace(cast({c} as string), '.', '') as decimal(38, 0)) "
                    "as string)")
        if k in ("float", "double"):
            d = f"cast({c} as double)"
            return (f"case when isnan({d}) then 'NaN' when {d} = double('Infinity') then "
                    f"'Infinity' when {d} = double('-Infinity') then '-Infinity' when "
                    f"abs({d}) >= {FLOAT_LIMIT} then null else cast(cast(round({d}, "
                    f"{FLOAT_DIGITS}) as decimal(38, {FLOAT_DIGITS})) as string) end")
        return LAKE_TEXT.get(lake, "cast({c} as string)").format(c=c)
