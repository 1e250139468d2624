"""TRUNCATE of one partition (python_ingest/sources/postgres/partitions.py, issue #58.4): the
guard PostgreSQL 13 gets (its pgoutput sends no logical messages), and a partition created and
truncated while the tap is behind."""

from __future__ import annotations

import pytest

from python_ingest.sources.postgres import partitions
from tests.sources.postgres.support import partitioned_events

pytestmark = [pytest.mark.postgres_source, pytest.mark.reliability]


def _deletes(env, table: str) -> int:
    decoder = env.decoder(table)
    return sum(1 for _k, value in env.messages(table) if decoder.decode(value)["_is_deleted"])


def test_the_guard_is_chosen_by_the_servers_version() -> None:
    """PostgreSQL 13's pgoutput has no 'messages' option: the trigger's logical message never
    reached the tap, so a partition's TRUNCATE was lost without a word. Before 14 the guard
    deletes the partition's rows itself, before the TRUNCATE, as ordinary deletes."""
    assert not partitions.by_messages(130000) and not partitions.by_messages(139999)
    assert partitions.by_messages(140000) and partitions.by_messages(150004)
    function, trigger = partitions.trigger_sql("public", '"public"."events_2023"', False)
    assert "DELETE FROM ONLY" in function and "pg_logical_emit_message" not in function
    assert trigger.startswith(f"CREATE TRIGGER {partitions.TRIGGER} BEFORE TRUNCATE ")
    function, trigger = partitions.trigger_sql("public", '"public"."events_2023"', True)
    assert "pg_logical_emit_message" in function and " AFTER TRUNCATE " in trigger


def test_the_postgresql_13_guard_deletes_a_partitions_rows_before_its_truncate(pg_env) -> None:
    """The guard PostgreSQL 13 gets, put on here (15) before the tap starts (the tap keeps a
    partition's guard): a TRUNCATE of one partition deletes exactly its rows, one of the whole
    table every row once more; the lake ends equal to the table both times."""
    from python_ingest.sources.postgres import server

    env = pg_env
    env.sql(*partitioned_events())
    env.add_jobs()
    source = env.settings().source(env.source)
    conn = server.connect(source)
    try:
        assert partitions.guard(conn, source, messages=False) == []
    finally:
        conn.close()
    env.tap_until_end()
    functions = env.sql("SELECT DISTINCT p.proname FROM pg_trigger t JOIN pg_proc p ON p.oid = "
                        "t.tgfoid WHERE t.tgname = 'sluice_truncate_partition'")
    assert functions == [(partitions.ROWS_FUNCTION,)]
    env.sql("INSERT INTO events SELECT g, DATE '2023-06-01' + g * 3, 'x' "
            "FROM generate_series(1, 100) g")
    env.tap_until_end()
    env.sql("TRUNCATE events_2023", "INSERT INTO events VALUES (1000, '2023-07-01', 'after')")
    tap = env.tap_until_end()
    assert not tap.stopped
    kept = env.sql("SELECT count(*) FROM events")[0][0]
    assert 1 < kept < 100
    assert env.assert_equal("events") == kept
    env.sql("TRUNCATE events")
    env.tap_until_end()
    assert env.assert_equal("events") == 0
    assert _deletes(env, "events") == 101  # each row deleted once


def test_a_partition_created_and_truncated_while_the_tap_is_behind_is_seen(pg_env) -> None:
    """A partition created, filled and truncated before the tap read its first change: the
    tap put the trigger on only when the stream described it (after the TRUNCATE), so the
    lake kept its rows. An event trigger now guards a partition as it is created (or
    attached), in its own transaction."""
    env = pg_env
    env.sql(*partitioned_events())
    env.add_jobs()
    env.tap_until_end()  # the publication, the slot, the guards and the event trigger
    assert env.sql("SELECT count(*) FROM pg_event_trigger WHERE evtname = %s",
                   params=(partitions.EVENT_TRIGGER,)) == [(1,)]
    env.sql("INSERT INTO events VALUES (1, '2023-02-02', 'kept')",
            "CREATE TABLE events_2025 PARTITION OF events FOR VALUES FROM ('2025-01-01') "
            "TO ('2026-01-01')",
            "INSERT INTO events SELECT g, DATE '2025-01-01' + g, 'x' "
            "FROM generate_series(2, 30) g",
            "TRUNCATE events_2025",
            "CREATE TABLE events_2026 (id int NOT NULL, at date NOT NULL, what text)",
            "ALTER TABLE events ATTACH PARTITION events_2026 FOR VALUES FROM ('2026-01-01') "
            "TO ('2027-01-01')",
            "INSERT INTO events VALUES (40, '2026-03-03', 'gone'), (41, '2023-03-03', 'kept')",
            "TRUNCATE events_2026")
    tap = env.tap_until_end()
    assert not tap.stopped
    assert env.assert_equal("events") == 2
