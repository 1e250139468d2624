"""Issue #58.2: a session's own ``binlog_row_image`` (MINIMAL, NOBLOB) writes rows events that
carry only some columns; the global FULL is all the tap can check at start.

What the real server writes for them (MariaDB: MINIMAL leaves the before image only the key and
the after image only the columns set; NOBLOB leaves out BLOB/TEXT columns the statement did
not touch) is published as partial updates keyed by the before image's key, so the lake ends
equal to the source: before the fix an update under MINIMAL deleted its row from the lake (its
after image lacks the key: an error row) and one under NOBLOB nulled the TEXT column. A delete
under MINIMAL (only the key) still deletes. What cannot be published without inventing values
(an insert under MINIMAL leaves out the defaulted columns; a key changed under MINIMAL) stops
its table, naming the setting, and nothing of it is published.
"""

from __future__ import annotations

from typing import Any

import pytest

from python_ingest.sources.binlog import fastpath
from tests.sources.binlog.lake import (
    assert_lake_equals_source,
    lake_rows,
    make_project,
    run_pipeline,
    scaffold,
)

pytestmark = [pytest.mark.reliability, pytest.mark.e2e]  # a broker and a MariaDB

TABLE = "CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(20), b INT, c TEXT)"
ROWS = ("INSERT INTO t VALUES (1, 'alpha', 1, 'long text one'), (2, 'beta', 2, "
        "'long text two'), (3, 'gamma', 3, 'three'), (4, 'delta', 4, 'four'), "
        "(5, 'epsilon', 5, 'five')")
PARTIAL = ("SET SESSION binlog_row_image = MINIMAL",
           "UPDATE t SET b = 11 WHERE id = 1",
           "DELETE FROM t WHERE id = 3",
           "UPDATE t SET a = 'all', b = 55, c = 'every column set' WHERE id = 5",
           "SET SESSION binlog_row_image = NOBLOB",
           "UPDATE t SET b = 21 WHERE id = 2",
           "UPDATE t SET c = 'four, changed' WHERE id = 4")


@pytest.mark.e2e
def test_partial_row_images_land_as_partial_updates(tap_env: Any, spark: Any) -> None:
    """The issue's reproduction, to the lake (Hudi), the fast path on (it leaves such events
    to the general path)."""
    env = tap_env
    make_project(env.tmp)
    env.sql(TABLE)
    scaffold(env)
    env.tap_until_end()  # the checkpoint at the binlog's end: what follows is published
    env.sql(ROWS, *PARTIAL)
    tap = env.tap_until_end()
    assert not tap.stopped and tap.stats.errors == 0, (tap.stopped, tap.stats)
    assert env.sql("SELECT * FROM t WHERE id IN (1, 2) ORDER BY id") == [
        (1, "alpha", 11, "long text one"), (2, "beta", 21, "long text two")]
    run_pipeline(spark, env)
    assert assert_lake_equals_source(spark, env, "t") == 4
    lake = lake_rows(spark, env, "t")
    assert (lake["1"]["a"], lake["1"]["c"], lake["2"]["c"]) == (
        "alpha", "long text one", "long text two")


def test_partial_images_on_the_general_path_and_what_stops_a_table(
        tap_env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same events with the fast path off, checked on the topic (the merge's semantics:
    support.TapEnv.oracle); an insert under MINIMAL and a key changed under MINIMAL stop their
    tables naming the setting, and publish nothing of them."""
    monkeypatch.setattr(fastpath, "ENABLED", False)
    env = tap_env
    env.start_tapping(TABLE, "CREATE TABLE ins (id INT PRIMARY KEY, a INT, d INT DEFAULT 5)",
                      "CREATE TABLE moved (id INT PRIMARY KEY, a INT)")
    env.sql(ROWS, "INSERT INTO moved VALUES (1, 1), (2, 2)", *PARTIAL,
            "SET SESSION binlog_row_image = MINIMAL", "INSERT INTO ins (id, a) VALUES (1, 1)",
            "UPDATE moved SET id = 3 WHERE id = 1")
    tap = env.tap_until_end()
    assert env.assert_equal("t") == 4
    assert sorted(tap.stopped) == [f"{env.database}.ins", f"{env.database}.moved"]
    for table, what in (("ins", "an insert event"), ("moved", "an update of the key")):
        reason = tap.stopped[f"{env.database}.{table}"]["error"]
        assert what in reason and "binlog_row_image=MINIMAL or NOBLOB" in reason, reason
    assert "lacks column(s) d" in tap.stopped[f"{env.database}.ins"]["error"]
    assert env.messages("ins") == []  # nothing of the insert: no value invented
    assert len(env.messages("moved")) == 2  # the two inserts under FULL only
