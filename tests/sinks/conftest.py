"""Fixtures of the dispersal tests (the private PostgreSQL is tests/conftest.py's)."""

from __future__ import annotations

from tests.steps.conftest import project  # noqa: F401 (a dbt project per test, as in steps)
