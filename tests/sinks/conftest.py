"""Fixtures of the dispersal tests (the private PostgreSQL is tests/conftest.py's)."""

from __future__ import annotations

import pytest

from tests.servers import require_fixture_servers
from tests.steps.conftest import project  # noqa: F401 (a dbt project per test, as in steps)


def pytest_runtest_setup(item: pytest.Item) -> None:
    require_fixture_servers(item)  # no PostgreSQL: skipped, a failure under CI=true
