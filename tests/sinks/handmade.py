"""A hand-made lake table for the sink tests: every column type the changelog produces,
rows and tombstones committed with the merge checkpoint as the lake materialization commits
them (append-only, so a key's older rows stay: the sinks read by batch range)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from python_ingest.steps.merge.index import INDEX_COLUMNS
from python_ingest.tables.checkpoints import step_properties
from python_ingest.tables.formats import append, ensure_table
from python_ingest.tables.names import JobTables

COLUMNS = [
    ("_row_key", "string"), ("c_int", "int"), ("c_bigint", "bigint"), ("c_float", "float"),
    ("c_double", "double"), ("c_decimal", "decimal(12,3)"), ("c_string", "string"),
    ("c_binary", "binary"), ("c_boolean", "boolean"), ("c_date", "date"),
    ("c_timestamp", "timestamp"), ("c_array", "array<int>"), ("c_map", "map<string,int>"),
    ("c_struct", "struct<a:int,b:string>"), ("_ref_key", "bigint"), ("_is_deleted", "boolean"),
    ("_batch_id", "bigint"),
]
TRICKY = "tab\there, newline\nthere, back\\slash, \\N, quote ' \" and ünïcödé ☃"
WHEN = dt.datetime(2024, 2, 29, 23, 59, 58, 123456, tzinfo=dt.UTC)


def row(key: str, batch: int, n: int, **values: Any) -> dict[str, Any]:
    """A lake row of batch ``batch`` whose values derive from ``n`` (``values`` override)."""
    base = {"_row_key": key, "c_int": n, "c_bigint": 2**40 + n, "c_float": 1.5,
            "c_double": n / 3, "c_decimal": Decimal("-12345.678"), "c_string": f"v{n}",
            "c_binary": bytes([0, 255, n % 256]), "c_boolean": n % 2 == 0,
            "c_date": dt.date(1, 1, 1) if n == 1 else dt.date(2024, 2, 29),
            "c_timestamp": WHEN, "c_array": [n, None, 3], "c_map": {"k": n, "none": None},
            "c_struct": {"a": n, "b": None}, "_ref_key": n, "_is_deleted": False,
            "_batch_id": batch}
    return {**base, **values}


def write_batch(spark: Any, tables: JobTables, batch: int, rows: list[dict[str, Any]],
                deleted: list[str]) -> None:
    """One 'merge': the index entries first (deletes and writes), then the lake rows with the
    merge checkpoint (as the lake materialization commits them)."""
    from pyspark.sql import types as T

    schema = T._parse_datatype_string(", ".join(f"{n}: {t}" for n, t in COLUMNS))
    entries = [(k, batch, True, batch) for k in deleted] + \
        [(r["_row_key"], batch, False, batch) for r in rows]
    ensure_table(spark, tables.index, INDEX_COLUMNS)
    append(spark.createDataFrame(entries, "_row_key string, _ref_key bigint, "
                                 "_is_deleted boolean, _batch_id bigint")
           .selectExpr("*", "current_timestamp() as _indexed_at"),
           tables.index, step_properties("merge", batch))
    lake = tables.lake
    assert lake is not None
    append(spark.createDataFrame([tuple(r[n] for n, _ in COLUMNS) for r in rows], schema),
           lake, step_properties("merge", batch))
