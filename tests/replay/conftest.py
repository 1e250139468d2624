"""The per-test dbt project of the pipeline tests."""

from tests.steps.conftest import project  # noqa: F401  (a fixture)
