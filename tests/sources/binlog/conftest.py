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


@pytest.fixture
def replicated_pair(tmp_path_factory: pytest.TempPathFactory
                    ) -> Iterator[tuple[LocalServer, LocalServer]]:
    """A private primary and its replica by GTID (``MASTER_USE_GTID=slave_pos``), both in GTID
    domain 0 with their own server_id (1 and 2); the replica logs what it applies in its own
    binlog (``--log-slave-updates``). The primary's binlog is rotated three times first, so
    the same transactions lie under other file names and positions on each server."""
    require_mariadb()
    primary = LocalServer(tmp_path_factory.mktemp("primary")).start()
    replica = LocalServer(tmp_path_factory.mktemp("replica"))
    try:
        replica.start(extra=["--server-id=2", "--log-slave-updates"])
        with primary.root() as conn, conn.cursor() as cur:
            for _ in range(3):
                cur.execute("FLUSH BINARY LOGS")
        with replica.root() as conn, conn.cursor() as cur:
            cur.execute("RESET MASTER")  # its own start-up statements: not the primary's history
            cur.execute("SET GLOBAL gtid_slave_pos = ''")
            cur.execute("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%s, "
                        "MASTER_USER=%s, MASTER_PASSWORD=%s, MASTER_USE_GTID=slave_pos",
                        (primary.port, primary.tap_user, primary.tap_password))
            cur.execute("START SLAVE")
        yield primary, replica
    finally:
        replica.stop()
        primary.stop()
