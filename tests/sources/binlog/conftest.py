"""Fixtures of the binlog tap tests: a private MariaDB server with the binlog on.

The server is started by the tests (``mariadb-install-db`` into a temporary data dir, then
``mariadbd --no-defaults ... --log-bin --binlog-format=ROW --binlog-row-image=FULL
--binlog-row-metadata=FULL``) and stopped at the end; the machine's own server is never used.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from python_ingest.sources.binlog.server import LocalServer
from tests.servers import require_mariadb

_databases = itertools.count(1)


@pytest.fixture(scope="session")
def mariadb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    """A private mariadbd on a free loopback port, with a tap user that has only the grants
    docs/binlog-tap.md asks for."""
    require_mariadb()  # skipped without it, a failure under CI=true (tests/servers.py)
    server = LocalServer(tmp_path_factory.mktemp("mariadb")).start()
    yield server
    server.stop()


@pytest.fixture
def database(mariadb: LocalServer, request: pytest.FixtureRequest) -> str:
    """A fresh database for this test."""
    name = f"db{next(_databases)}"
    with mariadb.root() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    return name


@pytest.fixture
def tap_env(tmp_path: Path, workdir: Path, broker: str, mariadb: LocalServer,
            database: str) -> Any:
    """A sluice.yml with one source tapping this test's database (state in tmp_path)."""
    from tests.sources.binlog.support import TapEnv

    return TapEnv(tmp_path, workdir, broker, mariadb, database)
