"""The row copies of keyless full-row-identity tables, written incrementally beside the
PostgreSQL tap's checkpoint (python_ingest/sources/postgres/rowlog.py, issue #50.15): a
checkpoint writes what changed, not the whole digest map; kills between the files lose nothing."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.postgres_source, pytest.mark.reliability]


def test_the_log_counts_only_up_to_the_checkpoint_and_bases_replace_it(tmp_path) -> None:
    from python_ingest.sources.postgres.rowlog import RowLog

    log = RowLog(tmp_path, "src")
    log.write_base(100, {"public.t": {"a": 2, "b": 1}})
    log.settle(100)
    log.append(200, {"public.t": {"a": 1, "c": 1}})
    log.append(300, {"public.t": {"b": 0}})  # written; its checkpoint file was not (a kill)
    assert RowLog(tmp_path, "src").load(200, 100) == {"public.t": {"a": 1, "b": 1, "c": 1}}
    assert log.log_path.read_text().count("\n") == 1  # the line past the checkpoint dropped
    log.append(300, {"public.t": {"c": 3}})
    assert RowLog(tmp_path, "src").load(300, 100) == {"public.t": {"a": 1, "b": 1, "c": 3}}
    # a new base written, killed before the checkpoint file names it: the old base still counts
    log.write_base(400, {"public.t": {"a": 9}})
    assert RowLog(tmp_path, "src").load(300, 100) == {"public.t": {"a": 1, "b": 1, "c": 3}}
    log.settle(400)  # (after the checkpoint file named it)
    assert RowLog(tmp_path, "src").load(400, 400) == {"public.t": {"a": 9}}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.rows.0000000000000190.json",
                                                          "src.rows.log"]


def test_a_keyless_table_checkpoint_writes_only_what_changed(pg_env) -> None:
    env = pg_env
    env.sql("CREATE TABLE tags (tag text, n int)", "ALTER TABLE tags REPLICA IDENTITY FULL")
    env.add_jobs()
    env.tap_until_end()
    env.sql("INSERT INTO tags SELECT 't' || g, g FROM generate_series(1, 2000) g",
            "INSERT INTO tags VALUES ('dup', 1), ('dup', 1), ('dup', 1)")
    env.tap_until_end()
    folder = env.state_dir / "tap"
    checkpoint = folder / f"{env.source}.json"
    rows_log = folder / f"{env.source}.rows.log"
    assert checkpoint.stat().st_size < 4096  # not the 2001 digests (before: ~150 kB)
    assert "rows_base" in env.checkpoint()
    for n in range(3):  # small transactions, each its own checkpoint
        before = rows_log.stat().st_size
        env.sql(f"UPDATE tags SET n = n + 1 WHERE tag = 't{n + 5}'",
                "DELETE FROM tags WHERE ctid = (SELECT min(ctid) FROM tags WHERE tag = 'dup')"
                if n == 0 else "SELECT 1")
        env.tap_until_end()
        assert 0 < rows_log.stat().st_size - before < 1024
        assert checkpoint.stat().st_size < 4096
    # a restarted tap continues from the base and the log: copies counted right
    env.sql("INSERT INTO tags VALUES ('dup', 1)",
            "DELETE FROM tags WHERE ctid = (SELECT max(ctid) FROM tags WHERE tag = 'dup')",
            "DELETE FROM tags WHERE tag = 't9'")
    env.tap_until_end()

    def rows(found: list) -> list:
        return sorted(found)

    live = env.oracle("tags")
    assert rows([(r["tag"], r["n"]) for r in live.values()]) == \
        rows(env.sql("SELECT tag, n FROM tags"))
    assert len(live) == 2001
