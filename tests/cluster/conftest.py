"""The cluster tests' servers: a private PostgreSQL (tests/conftest.py's ``postgres``)."""

from __future__ import annotations

import pytest

from tests.servers import require_fixture_servers


def pytest_runtest_setup(item: pytest.Item) -> None:
    require_fixture_servers(item)  # no PostgreSQL: skipped, a failure under CI=true
