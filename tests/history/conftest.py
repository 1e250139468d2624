"""The history's pipeline tests use the steps tests' dbt project per test."""

from tests.steps.conftest import project  # noqa: F401
