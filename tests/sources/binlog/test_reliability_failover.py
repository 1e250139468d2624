"""Failover by GTID (issue #35.8): the source moves from its primary to a replica, whose binlog
has other file names and positions; the tap resumes there from the same transaction, by its
GTID, and the topics end equal to the source, nothing lost and nothing doubled."""

from __future__ import annotations

import random
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from python_ingest.exceptions import SluiceError
from python_ingest.sources.binlog.bootstrap import bootstrap
from python_ingest.sources.binlog.server import LocalServer
from tests.sources.binlog.support import TapEnv, gtid_binlog_pos, wait_replicated

KEYS = 60


def _transactions(env: TapEnv, rng: random.Random, count: int) -> None:
    """``count`` small transactions of inserts, updates and deletes of keyed rows, and of
    identical copies in a table without a key (a full-row identity: a copy published twice
    or missed shows as one too many or too few)."""
    with env.server.root(env.database) as conn, conn.cursor() as cur:
        for _ in range(count):
            cur.execute("BEGIN")
            for _ in range(rng.randint(1, 3)):
                key, pick = rng.randint(1, KEYS), rng.random()
                if pick < 0.4:
                    cur.execute("INSERT INTO t VALUES (%s, %s, 'new') ON DUPLICATE KEY UPDATE "
                                "v = v + 1, note = 'again'", (key, rng.randint(0, 999)))
                elif pick < 0.6:
                    cur.execute("UPDATE t SET v = v + 1, note = 'updated' WHERE id = %s", (key,))
                elif pick < 0.7:
                    cur.execute("DELETE FROM t WHERE id = %s", (key,))
                elif pick < 0.9:
                    cur.execute("INSERT INTO dup VALUES (%s)", (rng.choice("abc"),))
                else:
                    cur.execute("DELETE FROM dup WHERE v = %s LIMIT 1", (rng.choice("abc"),))
            cur.execute("COMMIT")


def _copies(env: TapEnv) -> tuple[Counter[str], Counter[str]]:
    """The copies of each row of ``dup``: in its topic (the merge's view), in the source."""
    published = Counter(str(row["v"]) for row in env.oracle("dup").values())
    return published, Counter(str(v) for (v,) in env.sql("SELECT v FROM dup"))


@pytest.mark.reliability
@pytest.mark.e2e
def test_the_tap_fails_over_to_a_replica_by_gtid(
        tmp_path: Path, workdir: Path, broker: str,
        replicated_pair: tuple[LocalServer, LocalServer]) -> None:
    primary, replica = replicated_pair
    with primary.root() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE shop")
    env = TapEnv(tmp_path, workdir, broker, primary, "shop")
    rng = random.Random(358)
    try:
        env.sql("CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL, note VARCHAR(20))",
                "CREATE TABLE dup (v VARCHAR(10))")
        env.add_jobs()
        env.tap_until_end()
        first = env.checkpoint()
        tap = env.start_tap()
        _transactions(env, rng, 120)
        deadline = time.monotonic() + 60
        while env.checkpoint() == first and time.monotonic() < deadline:
            time.sleep(0.1)
        tap.send_signal(signal.SIGKILL)  # the tap dies mid-stream ...
        tap.wait()
        _transactions(env, rng, 80)  # ... and never reads these on the primary
        on_primary = env.checkpoint()
        assert on_primary is not None and on_primary["file"] == "binlog.000004", on_primary
        wait_replicated(primary, replica)
        primary.stop()  # the primary is gone: the replica takes over
        with replica.root() as conn, conn.cursor() as cur:
            cur.execute("STOP SLAVE")
        env.server = replica
        env.write_config()  # the same source, now at the replica's address
        _transactions(env, rng, 80)  # written on the new primary
        settings = env.settings()
        with pytest.raises(SluiceError, match="start the tap") as refused:  # positions first
            bootstrap(settings, settings.source(env.source), "shop.t", progress=lambda _: None)
        assert on_primary["gtid"] in str(refused.value) and env.checkpoint() == on_primary
        tap = env.start_tap()
        env.wait_caught_up()
        out = env.stop_tap(tap)
    finally:
        env.close()
    assert "STOPPED" not in out and f"holds its GTID {on_primary['gtid']}" in out, out
    assert env.assert_equal("t") > 10
    published, source = _copies(env)
    assert published == source and sum(source.values()) > 10, (published, source)
    checkpoint = env.checkpoint()
    assert checkpoint is not None and checkpoint["server"]["server_id"] == 2, checkpoint
    assert checkpoint["gtid"] == gtid_binlog_pos(replica), checkpoint
    assert (checkpoint["file"], checkpoint["pos"]) == env.master()  # the replica's binlog
