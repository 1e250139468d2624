"""DDL followed in stream order, as Debezium follows it (issue #50.1 and "What to build" 2):
a dump script's ``DROP DATABASE IF EXISTS`` / ``DROP TABLE IF EXISTS`` of nothing stops
nothing; a table created in the stream is published from its CREATE; a table dropped and
created again while the tap runs ends equal in the lake; which tables exist at a stream point
survives a restart from the checkpoint (existence.py)."""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from python_ingest.sources.binlog.existence import Existence
from python_ingest.sources.binlog.position import AckWindow, BinlogPosition
from tests.sources.binlog.lake import (
    assert_lake_equals_source,
    lake_rows,
    make_project,
    run_pipeline,
    scaffold,
)
from tests.sources.binlog.support import TapEnv


def _dump(cur: Any, db: str, rows: range) -> None:
    """What ``mysqldump --add-drop-database --databases db`` output does when loaded: drops
    that may find nothing, creates, rows."""
    cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
    cur.execute(f"CREATE DATABASE `{db}`")
    cur.execute(f"USE `{db}`")
    cur.execute("DROP TABLE IF EXISTS `t`")
    cur.execute("CREATE TABLE `t` (id INT PRIMARY KEY, v VARCHAR(20), amount DECIMAL(10,2))")
    cur.execute("DROP TABLE IF EXISTS `k`")
    cur.execute("CREATE TABLE `k` (v VARCHAR(20), n INT)")  # no key: full-row identity
    for i in rows:
        cur.execute("INSERT INTO t VALUES (%s, %s, %s)", (i, f"v{i}é", i * 1.25))
        cur.execute("INSERT INTO k VALUES (%s, %s)", (f"k{i % 7}", i % 3))


def _keyless(spark: Any, env: TapEnv) -> tuple[Counter[tuple], Counter[tuple]]:
    """Table k in the lake and in MariaDB, as multisets of (v, n)."""
    lake = Counter((r["v"], r["n"]) for r in lake_rows(spark, env, "k").values())
    return lake, Counter(tuple(r) for r in env.sql("SELECT v, n FROM k"))


@pytest.mark.reliability
@pytest.mark.e2e
def test_dump_script_from_earliest_then_drops_and_creates_while_tapping_end_equal(
        tmp_path: Path, workdir: Path, broker: str, mariadb: Any, database: str,
        spark: Any) -> None:
    """Issue #50.1: the binlog begins with ``DROP DATABASE IF EXISTS db`` (nothing there),
    ``CREATE DATABASE``, ``CREATE TABLE``s, rows; tapped from ``earliest`` after the scaffold
    registered the tables, nothing stops (was: every table STOPPED by the drop). Then, with
    ``sluice tap`` running (SIGKILLed and restarted once), the dump is loaded again (a real drop
    of the database), a table is dropped and created again; one pipeline run at the end (a
    run costs minutes here) lands every table equal to MariaDB."""
    db = f"{database}dump"
    env = TapEnv(tmp_path, workdir, broker, mariadb, db)
    env.write_config(start_from="earliest")
    make_project(env.tmp)
    try:
        with mariadb.root() as conn, conn.cursor() as cur:
            _dump(cur, db, range(1, 41))
        scaffold(env)  # registers t and k as they are now, like a user's first command
        tap = env.tap_until_end()
        assert not tap.stopped, tap.stopped
        assert env.assert_equal("t") == 40  # the topic holds the table (the merge's oracle)

        process = env.start_tap()
        with mariadb.root() as conn, conn.cursor() as cur:
            _dump(cur, db, range(21, 61))  # loaded again: rows 1..20 gone, others new
            cur.execute(f"UPDATE `{db}`.t SET v = 'changed' WHERE id % 5 = 0")
        env.wait_caught_up()
        env.stop_tap(process, signal.SIGKILL)
        process = env.start_tap()
        env.sql("DROP TABLE k", "CREATE TABLE k (v VARCHAR(20), n INT)",
                "INSERT INTO k VALUES ('after', 9), ('after', 9), ('x', 1)",
                "DROP TABLE IF EXISTS k_old", "INSERT INTO t VALUES (100, 'late', 3.50)")
        env.wait_caught_up()
        env.stop_tap(process)
    finally:
        env.close()
    assert not env.checkpoint()["stopped"], env.checkpoint()["stopped"]
    run_pipeline(spark, env)
    assert assert_lake_equals_source(spark, env, "t") == 41
    lake, source = _keyless(spark, env)
    assert lake == source == Counter({("after", 9): 2, ("x", 1): 1})


@pytest.mark.reliability
def test_existence_follows_the_stream() -> None:
    """A dump script's drops find nothing the stream has dropped already; tables created
    after a dropped database exist, the others not; unknown tables may exist (None)."""
    state = Existence()
    assert state.exists("db", "t") is None  # before anything: maybe (created before the tap)
    state = state.dropped_database("db")
    assert state.exists("db", "t") is False and state.exists("other", "t") is None
    state = state.created("db", "t")
    assert state.exists("db", "t") is True and state.exists("db", "u") is False
    state = state.dropped("db", "t").dropped("db", "u")
    assert state.exists("db", "t") is False and state.to_json() == {"db.": False}
    state = state.created("db", "t").created("x", "y").dropped("x", "z")
    assert state.to_json() == {"db.": False, "db.t": True, "x.z": False}
    state = state.created("x", "z")  # back to unknown: the map stays small
    assert state.exists("x", "z") is None and Existence.from_json(
        json.loads(json.dumps(state.to_json()))) == state


class _Producer:
    def __init__(self) -> None:
        self.acks = AckWindow()

    def poll(self) -> None:
        pass

    def flush(self) -> None:
        pass


@pytest.mark.reliability
def test_checkpoint_saves_the_existence_of_its_own_position(tmp_path: Path) -> None:
    """The checkpoint is the last transaction end whose messages the broker acknowledged: it
    must carry which tables exist *there*, not at the point read, or a restart (kill -9) that
    reads a drop and a create again would start from the wrong state."""
    from python_ingest.config import load_settings
    from python_ingest.sources.binlog.tap import Tap

    config = tmp_path / "sluice.yml"
    config.write_text(json.dumps({"state_dir": str(tmp_path / "state"), "sources": {"shop": {
        "host": "db", "password_env": "SHOP_PW", "include": ["shop.*"]}}}))
    settings = load_settings(config, env={})
    tap = Tap(settings, settings.source("shop"))
    producer = _Producer()
    tap.producer = producer  # type: ignore[assignment]
    tap._saved = tap._last_end = BinlogPosition("bin.000001", 4)
    producer.acks.issue()  # the drop's delete
    tap.existence = tap.existence.dropped("shop", "t")
    tap._commit(BinlogPosition("bin.000001", 100))
    producer.acks.issue()  # the new table's first row, not acknowledged yet
    tap.existence = tap.existence.created("shop", "t")
    tap._commit(BinlogPosition("bin.000001", 200))
    producer.acks.ack(0)
    tap._maybe_save(force=True)
    saved = tap.store.load()
    assert saved is not None and saved.position == BinlogPosition("bin.000001", 100)
    assert saved.existence == {"shop.t": False}  # the drop is behind it, the create ahead
    producer.acks.ack(1)
    tap._maybe_save(force=True)
    saved = tap.store.load()
    assert saved is not None and saved.position == BinlogPosition("bin.000001", 200)
    assert saved.existence == {}  # created again: may exist (unknown), as before the drop
