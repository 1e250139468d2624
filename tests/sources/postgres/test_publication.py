"""A table dropped and created again under sluice's own publication (FOR TABLE), while the tap
runs (python_ingest/sources/postgres/publication.py, issue #58.4)."""

from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.postgres_source, pytest.mark.reliability]


def _published(env, table: str) -> bool:
    return bool(env.sql("SELECT 1 FROM pg_publication_tables WHERE pubname = %s AND "
                        "tablename = %s", params=(f"sluice_{env.source}", table)))


def test_a_table_created_again_is_followed_while_the_tap_runs(pg_env) -> None:
    """The new table was outside the publication until the tap restarted: its old rows stayed
    in the lake and its new rows were not streamed. The running tap now adds it, and at that
    point of the stream deletes the old rows and streams the new table (it was empty when
    added); one created again holding rows stops, saying to bootstrap it."""
    env = pg_env
    env.sql("CREATE TABLE r (id int PRIMARY KEY, v text)",
            "INSERT INTO r SELECT g, 'old' FROM generate_series(1, 5) g")
    env.add_jobs()
    env.bootstrap_all()
    tap = env.start_tap()
    try:
        env.wait_caught_up()
        assert env.assert_equal("r") == 5
        env.sql("DROP TABLE r", "CREATE TABLE r (id int PRIMARY KEY, v text)")
        deadline = time.monotonic() + 30
        while not _published(env, "r"):  # (before: never, until a restart)
            assert time.monotonic() < deadline, "the running tap never added the new table"
            time.sleep(0.2)
        env.sql("INSERT INTO r VALUES (10, 'new'), (11, 'new')",
                "UPDATE r SET v = 'newer' WHERE id = 11")
        env.wait_caught_up()
        # created again with a row before the tap could add it: not in the stream
        env.sql("DROP TABLE r", "BEGIN", "CREATE TABLE r (id int PRIMARY KEY, v text)",
                "INSERT INTO r VALUES (20, 'before it joined')", "COMMIT")
        deadline = time.monotonic() + 30
        while not _published(env, "r"):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        env.wait_caught_up()
    finally:
        out = env.stop_tap(tap)
    stopped = env.checkpoint()["stopped"]["public.r"]["error"]
    assert "dropped and created again" in stopped and "bootstrap it" in stopped, out
    assert env.oracle("r") == {}  # the second table's old rows deleted too
    events = sorted((env.decoder("r").decode(v) for _k, v in env.messages("r")),
                    key=lambda e: e["_ref_key"])
    assert [(e["id"], e["v"]) for e in events if not e["_is_deleted"]][5:] == \
        [(10, "new"), (11, "new"), (11, "newer")]
    assert sum(e["_is_deleted"] for e in events) == 5 + 2  # each table's rows, once
