"""The project's dbt unit tests (unit_tests: beside the converter and the merge macro) run
in-process through the runner's dbt, on the test SparkSession, and all pass."""

from __future__ import annotations

from typing import Any

import pytest

from python_ingest.steps.dbt import Dbt
from tests.conftest import REPO


@pytest.mark.e2e  # needs Spark
def test_dbt_unit_tests_pass(spark: Any, base_settings: Any) -> None:
    result = Dbt(base_settings, project=REPO).invoke(["test", "--select", "test_type:unit"])
    outcomes = {r.node.name: str(r.status) for r in result.results}
    assert {r.node.resource_type for r in result.results} == {"unit_test"}
    assert set(outcomes) >= {
        "stg_demo__trips_converts_names_types_and_changed_columns",
        "trips_merge_precombines_ignores_late_changes_applies_partials_and_deletes"}
    assert set(outcomes.values()) == {"pass"}, outcomes
