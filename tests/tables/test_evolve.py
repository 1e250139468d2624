"""Column type widening rules (python_ingest/tables/evolve.py): what widens, and the loud
refusal of everything else, without Spark."""

from __future__ import annotations

import pytest

from python_ingest.exceptions import ColumnTypeChangeError
from python_ingest.tables.evolve import plan, widening

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
