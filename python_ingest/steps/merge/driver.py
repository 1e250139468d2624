"""The batch path's change set on the driver, for a run of few valid rows.

``driver_rows`` brings the run's valid rows to the driver (at most ``DRIVER_ROWS``);
``driver_changes`` folds a batch of them (steps/merge/changeset.py) against the global index held
in memory (steps/merge/index_cache.py), reads the lake rows of the keys that keep columns of their
current row, and returns the change set as the DataFrame the lake model's SQL gives: the same
schema (from the SQL's analysis, once per compiled job), for the same index insert and upsert
(steps/batch.py). It costs a Spark job or two on local rows instead of the SQL's five stages
over two Hudi tables.
"""

from __future__ import annotations

import collections
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from python_ingest.steps.merge import index_cache
from python_ingest.steps.merge.changeset import FRAMEWORK, Declined, change_set, fill_current

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from python_ingest.tables.names import JobTables

# valid rows of a run at most for the change set on the driver; more: the lake model's SQL
DRIVER_ROWS = int(os.environ.get("SLUICE_DRIVER_ROWS", "2000"))  # 0: always the SQL


@dataclass(frozen=True)
class Transport:
    """How a relation's rows travel to the driver and back: timestamps as their microseconds
    since the epoch, dates as their days since it (pyspark turns timestamps into local
    wall-clock times, which a time zone's autumn hour makes ambiguous, and neither into
    Python values before year 1 or after 9999, which the tap's zero dates are)."""

    select: list[str]
    back: dict[str, str]  # column -> the SQL function that turns its number back

    def as_collected(self, rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Transported ``rows`` as ``collect`` gives the relation's rows: each timestamp and
        date number back to the ``datetime`` (local wall-clock time) or ``date`` pyspark
        makes of it."""
        from pyspark.sql.types import DateType, TimestampType

        kinds = {c: (TimestampType() if f == "timestamp_micros" else DateType())
                 for c, f in self.back.items()}
        return [{c: kinds[c].fromInternal(v) if c in kinds and v is not None else v
                 for c, v in row.items()} for row in rows]


def transport(schema: Any) -> Transport | None:
    """None: a type that does not travel (a date or timestamp inside a struct, array or map,
    a timestamp without time zone, an interval)."""
    from pyspark.sql import types as T

    def has_time(kind: Any) -> bool:
        if isinstance(kind, (T.TimestampType, T.TimestampNTZType, T.DateType,
                             T.DayTimeIntervalType, T.YearMonthIntervalType)):
            return True
        if isinstance(kind, T.ArrayType):
            return has_time(kind.elementType)
        if isinstance(kind, T.MapType):
            return has_time(kind.keyType) or has_time(kind.valueType)
        if isinstance(kind, T.StructType):
            return any(has_time(f.dataType) for f in kind.fields)
        return False

    select, back = [], {}
    for f in schema.fields:
        if isinstance(f.dataType, T.TimestampType):
            select.append(f"unix_micros(`{f.name}`) as `{f.name}`")
            back[f.name] = "timestamp_micros"
        elif isinstance(f.dataType, T.DateType):
            select.append(f"unix_date(`{f.name}`) as `{f.name}`")
            back[f.name] = "date_from_unix_date"
        elif has_time(f.dataType):
            return None
        else:
            select.append(f"`{f.name}`")
    return Transport(select, back)


def driver_rows(valid: DataFrame) -> dict[int, list[dict[str, Any]]] | None:
    """The run's valid rows by batch, on the driver, when there are few (DRIVER_ROWS)."""
    travel = transport(valid.schema)
    if travel is None:
        return None
    rows = valid.selectExpr(*travel.select).limit(DRIVER_ROWS + 1).collect()
    if len(rows) > DRIVER_ROWS:
        return None
    by_batch: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_batch.setdefault(int(row["_batch_id"]), []).append(row.asDict())
    return by_batch


@dataclass(frozen=True)
class ChangeSet:
    """A batch's change set (persisted), its figures, the number of keys whose lake rows it
    read (-1: more than a literal list holds), and its index entries when it was folded on
    the driver (row key, ref key, deleted)."""

    changes: DataFrame
    figures: dict[str, int]
    partial_keys: int
    entries: list[tuple[str, int, bool]] | None = None


_change_set_schemas: dict[str, Any] = {}  # compiled job key + valid schema -> its change set's
_COMMENT = re.compile(r"--[^\n]*|/\*.*?\*/", re.S)


def is_the_macros(sql: str, schema: Any, valid_columns: list[str]) -> bool:
    """Whether a compiled lake model is the change set of macros/sluice_merge_changes.sql as
    it is, what the driver folds: a model that adds SQL around it (a wrapper query, a CTE of
    its own, a column it derives) is run as it is, by Spark."""
    text = " ".join(_COMMENT.sub(" ", sql).split()).lower()
    payload = [f.name for f in schema.fields if f.name not in FRAMEWORK]
    return (text.startswith("with changes as (") and text.endswith("select * from final")
            and [f.name for f in schema.fields][-len(FRAMEWORK) + 1:] == list(FRAMEWORK[1:])
            and set(payload) <= set(valid_columns))


def driver_changes(spark: SparkSession, sql: str, compiled_key: str, tables: JobTables,
                   view: str, batch_id: int, rows: list[dict[str, Any]]) -> ChangeSet:
    """The batch's change set folded on the driver (steps/merge/changeset.py), as the DataFrame the
    lake model's SQL would give. Raises Declined when the batch must take the SQL path."""
    from pyspark import StorageLevel
    from pyspark.sql import types as T

    valid = spark.table(view).schema
    schema_key = compiled_key + valid.json()
    if schema_key not in _change_set_schemas:  # analysis only, once per compiled job
        schema = spark.sql(sql).schema
        _change_set_schemas[schema_key] = schema if is_the_macros(sql, schema,
                                                                   valid.names) else None
    schema = _change_set_schemas[schema_key]
    if schema is None:
        raise Declined("its lake model adds SQL of its own to sluice_merge_changes")
    travel = transport(schema)
    if travel is None:
        raise Declined("a column type that does not travel to the driver")
    states = index_cache.states(spark, tables, batch_id)
    if states is None:
        raise Declined("the index is not held in memory")
    columns = [f.name for f in schema.fields if f.name not in FRAMEWORK]
    folded = change_set(rows, states, columns, batch_id)
    keys = sorted({f.row["_row_key"] for f in folded if f.needs_current})
    current: dict[str, dict[str, Any]] = {}
    if keys:  # the lake rows of the keys that keep columns of their current row
        wanted = {c for f in folded for c in f.needs_current}
        lake = T.StructType([f for f in spark.table(tables.lake or "").schema.fields
                             if f.name in wanted])
        lake_transport = transport(lake)
        if lake_transport is None:
            raise Declined("a lake column type that does not travel to the driver")
        select = ", ".join(["`_row_key`", *lake_transport.select])
        literal = ", ".join(quoted(k) for k in keys)
        current = {r["_row_key"]: r.asDict() for r in spark.sql(
            f"select {select} from {tables.lake} where _row_key in ({literal})").collect()}
    fill_current(folded, current)
    carried = T.StructType([f if f.name not in travel.back else T.StructField(
        f.name, T.IntegerType() if isinstance(f.dataType, T.DateType) else T.LongType(),
        f.nullable) for f in schema.fields])
    names = [f.name for f in schema.fields]
    try:
        local = spark.createDataFrame([tuple(f.row[n] for n in names) for f in folded],
                                      carried)
    except (TypeError, ValueError) as exc:  # a lake value of another type than the batch's
        raise Declined(f"a value the change set's schema does not take: {exc}") from exc
    changes = local.selectExpr(*(f"{travel.back[n]}(`{n}`) as `{n}`"
                                 if n in travel.back else f"`{n}`" for n in names))
    actions = collections.Counter(f.row["_merge_action"] for f in folded)
    figures = {"inserted": actions["insert"], "updated": actions["update"],
               "deleted": actions["delete"],
               "written": actions["insert"] + actions["update"] + actions["delete"],
               "changed": len(folded), "rejected": 0}
    entries = [(f.row["_row_key"], f.row["_ref_key"], f.row["_is_deleted"]) for f in folded]
    return ChangeSet(changes.persist(StorageLevel.MEMORY_AND_DISK), figures, len(keys),
                      entries)


def quoted(text: str) -> str:
    """A Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
