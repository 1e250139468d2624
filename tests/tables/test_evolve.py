"""Column type widening rules (python_ingest/tables/evolve.py): what widens, and the loud
refusal of everything else, without Spark."""

from __future__ import annotations

from typing import Any

import pytest

from python_ingest.exceptions import ColumnTypeChangeError
from python_ingest.tables.evolve import plan, widening, wider_columns

CURRENT = {"id": "int", "n": "int", "f": "float", "amount": "decimal(8,2)", "name": "string"}


@pytest.mark.parametrize(("old", "new"), [
    ("tinyint", "smallint"), ("smallint", "int"), ("int", "bigint"), ("tinyint", "bigint"),
    ("float", "double"), ("decimal(8,2)", "decimal(12,2)"), ("decimal(8,2)", "decimal(10,4)"),
    ("string", "string"), ("decimal(8, 2)", "decimal(8,2)"),
])
def test_widenings_without_loss_are_allowed(old: str, new: str) -> None:
    assert widening(old, new) is None


@pytest.mark.parametrize(("old", "new", "why"), [
    ("bigint", "int", "narrower integer"), ("double", "float", "narrower floating"),
    ("decimal(12,2)", "decimal(8,2)", "fewer digits before the point"),
    ("decimal(8,2)", "decimal(9,1)", "fewer digits after the point"),
    ("decimal(8,2)", "decimal(9,4)", "fewer digits before the point"),
    ("int", "string", "not a widening"), ("bigint", "double", "not a widening"),
])
def test_narrowing_or_other_changes_are_refused(old: str, new: str, why: str) -> None:
    found = widening(old, new)
    assert found is not None and why in found


def test_iceberg_widens_a_decimal_s_precision_only() -> None:
    assert widening("decimal(8,2)", "decimal(12,2)", "iceberg") is None
    assert "scale" in (widening("decimal(8,2)", "decimal(10,4)", "iceberg") or "")


@pytest.mark.reliability
def test_a_narrowing_stops_the_job_naming_table_column_types_and_what_to_do() -> None:
    """Issue #50: a narrowing never truncates; the error says where and what to do."""
    with pytest.raises(ColumnTypeChangeError) as raised:
        plan("lake.public_wide", CURRENT, [("id", "int"), ("amount", "decimal(6,2)")])
    text = str(raised.value)
    for part in ("lake.public_wide", "column amount", "decimal(8,2)", "decimal(6,2)",
                 "checkpoint did not move", "re-bootstrap", "sluice bootstrap"):
        assert part in text, part


def test_plan_lists_only_the_columns_that_widen() -> None:
    columns = [("id", "int"), ("N", "bigint"), ("f", "double"), ("amount", "decimal(12,2)"),
               ("new_column", "string"), ("name", "string")]
    assert plan("raw.j", CURRENT, columns) == [
        ("N", "int", "bigint"), ("f", "float", "double"),
        ("amount", "decimal(8,2)", "decimal(12,2)")]


def test_wider_columns_takes_the_incoming_widenings_only() -> None:
    lake = [("_row_key", "string"), ("ID", "int"), ("amount", "decimal(8,2)"), ("f", "float"),
            ("name", "string"), ("n", "bigint")]
    incoming = {"id": "bigint", "AMOUNT": "decimal(12,2)", "f": "double", "name": "int",
                "n": "int", "other": "string"}
    assert wider_columns(lake, incoming) == [
        ("_row_key", "string"), ("ID", "bigint"), ("amount", "decimal(12,2)"),
        ("f", "double"), ("name", "string"), ("n", "bigint")]
    # Iceberg widens a decimal's precision only: a new scale is left to the lake to refuse
    assert wider_columns([("amount", "decimal(8,2)")], {"amount": "decimal(10,4)"},
                         "iceberg") == [("amount", "decimal(8,2)")]


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


class _Catalog:
    def __init__(self, spark: _Spark) -> None:
        self.spark = spark

    def tableExists(self, name: str) -> bool:  # noqa: N802 (pyspark's name)
        return name.split(".")[-2:] == ["lake", "t__history"] or name.endswith("lake.t")

    def refreshTable(self, name: str) -> None:  # noqa: N802 (pyspark's name)
        pass


class _Schema:
    """A table schema as the writer reads it: fields with a name and a type."""

    def __init__(self, columns: list[tuple[str, str]]) -> None:
        self.fields = [type("Field", (), {"name": n, "dataType": type(
            "Type", (), {"simpleString": staticmethod(lambda t=t: t)})()})()
            for n, t in columns]
        self.names = [n for n, _ in columns]


class _Spark:
    """Just enough of a SparkSession for the history writer's shape and ensure: the tables'
    schemas, the statements run."""

    def __init__(self, schemas: dict[str, Any]) -> None:
        self.schemas, self.statements = schemas, []  # type: list[str]
        self.conf = _Conf({"spark.sluice.table_format": "iceberg"})
        self.catalog = _Catalog(self)

    def table(self, name: str) -> Any:
        return type("Table", (), {"schema": self.schemas[name],
                                  "columns": self.schemas[name].names})()

    def sql(self, statement: str) -> None:
        self.statements.append(statement)


@pytest.mark.reliability
def test_a_widening_reaches_the_history_table() -> None:
    """A source column widened: the history (lake.<model>__history) takes the wider type too,
    from the batch's valid rows (the batch path writes the history before the lake's upsert
    widens the lake), and its rows are written with it, not with the lake's old type."""
    from pyspark.sql import types as T

    from python_ingest.steps.history.writer import ensure, shape

    lake = T.StructType([T.StructField("_row_key", T.StringType()),
                         T.StructField("_ref_key", T.LongType()),
                         T.StructField("trip_id", T.IntegerType()),
                         T.StructField("fare", T.DecimalType(8, 2))])
    found = shape(_Spark({"lake.t": lake}), "lake.t",  # type: ignore[arg-type]
                  {"trip_id": "bigint", "fare": "decimal(12,2)", "_kafka_offset": "bigint"})
    assert dict(found.columns)["trip_id"] == "bigint"
    assert dict(found.columns)["fare"] == "decimal(12,2)"
    assert found.payload == ("trip_id", "fare")
    # the history as the lake was: the old types, and its own columns (whatever they are)
    spark = _Spark({"lake.t__history": _Schema([
        *((f.name, f.dataType.simpleString()) for f in lake.fields),
        *found.columns[len(lake.fields):]])})
    ensure(spark, "lake.t__history", found)  # type: ignore[arg-type]
    assert spark.statements == [
        "alter table lake.t__history alter column `trip_id` type bigint",
        "alter table lake.t__history alter column `fare` type decimal(12,2)"]
