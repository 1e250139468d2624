"""A private PostgreSQL cluster for the dispersal tests (python_ingest/sinks/pgserver.py):
initdb into a temporary folder, a server on a free loopback port, stopped at the end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from python_ingest.sinks.pgserver import LocalPostgres
from tests.steps.conftest import project  # noqa: F401 (a dbt project per test, as in steps)


@pytest.fixture(scope="session")
def postgres() -> Iterator[LocalPostgres]:
    server = LocalPostgres().start()
    yield server
    server.stop()
