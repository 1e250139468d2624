"""Fixtures of the PostgreSQL source's tests: a fresh database per test on the session's
private cluster (tests/conftest.py ``postgres``, started with wal_level=logical), and a
sluice.yml with one ``kind: postgres`` source tapping it."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_databases = itertools.count(1)


@pytest.fixture
def pg_env(tmp_path: Path, workdir: Path, broker: str, postgres: Any) -> Iterator[Any]:
    """This test's database, source and state (tests/sources/postgres/support.py PgEnv); its
    replication slots are dropped at the end."""
    from tests.sources.postgres.support import PgEnv, admin

    database = f"pgsrc{next(_databases)}"
    with admin(postgres) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {database}")
    env = PgEnv(tmp_path, workdir, broker, postgres, database)
    try:
        yield env
    finally:
        env.close()
        with admin(postgres) as conn, conn.cursor() as cur:
            cur.execute("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                        "WHERE database = %s AND active", (database,))
            cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                        "WHERE database = %s AND NOT active", (database,))
