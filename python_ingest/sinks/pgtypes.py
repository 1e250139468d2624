"""Lake (Spark) column types as PostgreSQL column types, and each value as the text
PostgreSQL's COPY reads (docs/dispersal.md, "Type mapping").

The text is made by Spark, per column, so the driver only moves finished COPY lines: no Python
object per value. Nested values (arrays, maps, structs) become jsonb: one rule for any depth,
nulls inside kept, and queryable with PostgreSQL's JSON operators.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from python_ingest.exceptions import DispersalError

if TYPE_CHECKING:
    from pyspark.sql import Column

SCALARS = {
    "tinyint": "smallint", "smallint": "smallint", "int": "integer", "bigint": "bigint",
    "float": "real", "double": "double precision", "string": "text", "boolean": "boolean",
    "binary": "bytea", "date": "date", "timestamp": "timestamptz",
    "timestamp_ntz": "timestamp", "void": "text",
}
DECIMAL = re.compile(r"^decimal\((\d+),(\d+)\)$")
NESTED = ("array<", "map<", "struct<")
NULL = "\\N"  # COPY text format's null


def pg_type(spark_type: str) -> str:
    """The PostgreSQL type of a lake column of ``spark_type`` (Spark's simpleString)."""
    if spark_type in SCALARS:
        return SCALARS[spark_type]
    if spark_type.startswith(("varchar(", "char(")):
        return "text"
    match = DECIMAL.match(spark_type)
    if match:
        return f"numeric({match.group(1)},{match.group(2)})"
    if spark_type.startswith(NESTED):
        return "jsonb"
    raise DispersalError(f"lake column type {spark_type} has no PostgreSQL mapping yet; "
                         "cast it in the lake model (docs/dispersal.md, Type mapping)")


def escaped(text: Column) -> Column:
    """``text`` escaped for COPY's text format (backslash, newline, carriage return, tab)."""
    from pyspark.sql import functions as F

    for plain, escape in (("\\\\", "\\\\\\\\"), ("\n", "\\\\n"), ("\r", "\\\\r"),
                          ("\t", "\\\\t")):
        text = F.regexp_replace(text, plain, escape)
    return text


def copy_text(name: str, spark_type: str) -> Column:
    """Column ``name`` as COPY text (``\\N`` for null)."""
    from pyspark.sql import functions as F

    column = F.col(f"`{name}`")
    kind = pg_type(spark_type)
    if kind == "boolean":
        text = F.when(column, F.lit("t")).when(~column, F.lit("f"))  # null stays null
    elif kind == "bytea":
        text = F.concat(F.lit("\\\\x"), F.lower(F.hex(column)))
    elif kind == "timestamptz":  # with the era: the tap's zero dates lie before year 1
        text = F.date_format(column, "yyyy-MM-dd HH:mm:ss.SSSSSSxxx G")
    elif kind == "timestamp":
        text = F.date_format(column, "yyyy-MM-dd HH:mm:ss.SSSSSS G")
    elif kind == "date":  # Spark's own text of year 0 is -0001, PostgreSQL's 0001 BC
        text = F.date_format(column, "yyyy-MM-dd G")
    elif kind == "jsonb":
        text = escaped(F.to_json(column, {"ignoreNullFields": "false"}))  # keep nulls
    elif kind == "text":
        text = escaped(column.cast("string"))
    else:  # numbers: Spark's text is PostgreSQL's input (1.0E10, NaN, Infinity)
        text = column.cast("string")
    return F.coalesce(text, F.lit(NULL))


def copy_line(columns: list[tuple[str, str]]) -> Column:
    """One COPY text line (without its newline) of ``columns`` (name, Spark type)."""
    from pyspark.sql import functions as F

    return F.concat_ws("\t", *[copy_text(n, t) for n, t in columns])
