"""Resume against the server of the checkpoint only (issue #9.9): another server, or the same
server after RESET MASTER, is refused with an error naming both and the fix. Another server is
accepted only when its GTID history holds the checkpoint's GTID (a failover, issue #35.8:
test_reliability_failover.py); B's does not, and the error names that GTID."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from python_ingest.exceptions import TapError
from python_ingest.sources.binlog.server import LocalServer
from tests.servers import require_mariadb
from tests.sources.binlog.support import TapEnv


@pytest.fixture(scope="module")
def server_b(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    """A second private mariadbd (its own server_id, as servers in one topology have)."""
    require_mariadb()
    server = LocalServer(tmp_path_factory.mktemp("mariadb_b")).start(extra=["--server-id=2"])
    yield server
    server.stop()


def _fill(env: TapEnv, first: int, count: int) -> None:
    env.sql(*(f"INSERT INTO t VALUES ({i}, REPEAT('x', 200))" for i in range(first,
                                                                           first + count)))


def _published(env: TapEnv) -> int:
    return len(env.messages("t"))


@pytest.mark.reliability
def test_resuming_against_another_server_is_refused(tap_env, server_b: LocalServer) -> None:
    env = tap_env
    env.start_tapping("CREATE TABLE t (id INT PRIMARY KEY, v TEXT)")
    _fill(env, 1, 5)
    env.tap_until_end()
    checkpoint = env.checkpoint()
    with server_b.root() as conn, conn.cursor() as cur:  # B: the same database and table
        cur.execute(f"CREATE DATABASE {env.database}")
        cur.execute(f"CREATE TABLE {env.database}.t (id INT PRIMARY KEY, v TEXT)")
        cur.executemany(f"INSERT INTO {env.database}.t VALUES (%s, 'b')",
                        [(i,) for i in range(100, 160)])
    env.write_config(port=server_b.port)  # the same source name, now pointing at B
    with pytest.raises(TapError) as err:
        env.tap_until_end()
    message = str(err.value)
    assert "server_id 1" in message and "server_id 2" in message, message
    # failover goes by GTID (#35.8): B's history does not hold the checkpoint's GTID
    assert checkpoint["gtid"] and f"GTID {checkpoint['gtid']}" in message, message
    assert "bootstrap" in message and f"{env.source}.json" in message, message
    assert _published(env) == 5 and env.checkpoint() == checkpoint


@pytest.mark.reliability
def test_resuming_after_reset_master_is_refused(tmp_path: Path, workdir: Path, broker: str,
                                                server_b: LocalServer) -> None:
    with server_b.root() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE reset_db")
    env = TapEnv(tmp_path, workdir, broker, server_b, "reset_db")
    env.start_tapping("CREATE TABLE t (id INT PRIMARY KEY, v TEXT)")
    _fill(env, 1, 20)
    env.tap_until_end()
    checkpoint = env.checkpoint()
    assert checkpoint is not None
    with server_b.root() as conn, conn.cursor() as cur:
        cur.execute("RESET MASTER")  # the binlog starts over at binlog.000001
    first = 100
    while env.master()[1] <= checkpoint["pos"]:  # the new binlog.000001 grows past it
        _fill(env, first, 10)
        first += 10
    assert env.master()[0] == checkpoint["file"] and env.master()[1] > checkpoint["pos"]
    with pytest.raises(TapError) as err:
        env.tap_until_end()
    message = str(err.value)
    assert "RESET MASTER" in message and checkpoint["gtid"] in message, message
    assert "bootstrap" in message, message
    assert _published(env) == 20 and env.checkpoint() == checkpoint
