"""Issue #58.3: binlog events the tap cannot read stop it, naming the setting, where they were
dropped without a word.

A MariaDB started with ``--log-bin-compress=ON`` writes compressed rows events (types
166-171), which mysql-replication has no class for: before the fix the tap skipped them and
reported "0 row changes ... N transactions", its checkpoint moving past the lost changes. Now
such a server is refused at start, and a compressed event met in the stream (the setting was
on for a while only) stops the tap there, its checkpoint left before the transaction. The
server here is a second private mariadbd (one per module) with that option; MySQL's events
(PARTIAL_UPDATE_ROWS_EVENT, TRANSACTION_PAYLOAD_EVENT) are checked on the classifier alone,
as no MySQL server runs here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from python_ingest.exceptions import SetupError, TapError
from python_ingest.sources.binlog import event_types
from python_ingest.sources.binlog.server import LocalServer
from tests.servers import require_mariadb
from tests.sources.binlog.support import TapEnv

pytestmark = pytest.mark.reliability

TABLE = "CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(40))"


@pytest.fixture(scope="module")
def compressing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    """A private mariadbd compressing every rows event (the minimum length lowered to 10)."""
    require_mariadb()
    server = LocalServer(tmp_path_factory.mktemp("compressing")).start(
        extra=["--log-bin-compress=ON", "--log-bin-compress-min-len=10"])
    yield server
    server.stop()


def _env(tmp_path: Path, workdir: Path, broker: str, server: LocalServer, name: str) -> TapEnv:
    with server.root() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    return TapEnv(tmp_path, workdir, broker, server, name)


def _compress(server: LocalServer, on: bool) -> None:
    with server.root() as conn, conn.cursor() as cur:
        cur.execute(f"SET GLOBAL log_bin_compress = {'ON' if on else 'OFF'}")


@pytest.mark.e2e
def test_a_compressing_server_is_refused_at_start(tmp_path: Path, workdir: Path, broker: str,
                                                  compressing: LocalServer) -> None:
    env = _env(tmp_path, workdir, broker, compressing, "refused")
    _compress(compressing, True)
    with pytest.raises(SetupError, match=r"log_bin_compress=ON \(needs OFF"):
        env.tap_until_end()
    assert env.checkpoint() is None  # refused before it read or saved anything


@pytest.mark.e2e
def test_compressed_rows_events_stop_the_tap_naming_the_setting(
        tmp_path: Path, workdir: Path, broker: str, compressing: LocalServer) -> None:
    env = _env(tmp_path, workdir, broker, compressing, "stopped")
    _compress(compressing, False)
    env.start_tapping(TABLE)
    before = env.checkpoint()
    assert before is not None
    _compress(compressing, True)
    try:
        env.sql("INSERT INTO t VALUES (1, 'one, long enough to compress'), "
                "(2, 'two, long enough to compress'), (3, 'three, long enough to compress')",
                "UPDATE t SET a = 'one, changed and compressed too' WHERE id = 1")
    finally:
        _compress(compressing, False)  # off again: the tap starts, and meets the events
    for _ in range(2):  # and again on a restart: never skipped
        with pytest.raises(TapError, match="log_bin_compress=ON") as raised:
            env.tap_until_end()
        assert "COMPRESSED_EVENT" in str(raised.value) and "bootstrap" in str(raised.value)
        assert env.checkpoint() == before  # not past the changes it could not read


def _event(kind: int, flags: int = 0) -> Any:
    return SimpleNamespace(packet=SimpleNamespace(event_type=kind, flags=flags))


def test_event_types_the_tap_cannot_read_are_named() -> None:
    """MySQL's settings by their event types; unknown types stop unless marked ignorable."""
    found = event_types.unreadable(_event(39))
    assert found and "binlog_row_value_options=PARTIAL_JSON" in found
    found = event_types.unreadable(_event(40))
    assert found and "binlog_transaction_compression=ON" in found
    found = event_types.unreadable(_event(0x14))  # a pre-GA rows event: no class for it
    assert found and "type 20, which the tap does not know" in found
    assert event_types.unreadable(_event(0x22)) is None  # MySQL's anonymous GTID
    assert event_types.unreadable(_event(0x70, event_types.LOG_EVENT_IGNORABLE_F)) is None
