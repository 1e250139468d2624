"""Tables as the stream shows them (issue #50): a key change that leaves a TOASTed value
alone, stored generated columns, tables dropped or renamed while the tap is behind, a table
dropped and created again, and a widening type change."""

from __future__ import annotations

import pytest

from tests.sources.postgres.support import BIG, partitioned_events, tapped_docs
from tests.sources.postgres.support import decoded_events as _events

pytestmark = [pytest.mark.postgres_source, pytest.mark.reliability]

def _partial_updates_of_missing_rows(events: list[dict]) -> list[dict]:
    """The events the merge would turn into error rows: a partial update (some columns
    left out) of a key that has no row at that point."""
    live: set[str] = set()
    missing = []
    for event in events:
        key = event["_row_key"]
        if event["_is_deleted"]:
            live.discard(key)
        elif event["_changed_columns"] is not None and key not in live:
            missing.append(event)
        else:
            live.add(key)
    return missing


def test_key_changes_that_leave_a_toasted_value_never_publish_a_partial_insert(pg_env) -> None:
    """#50.4: REPLICA IDENTITY DEFAULT, the tap behind: rows whose key changed (the TOASTed
    body unchanged, so not in the WAL) and that are gone by the time the tap reads them. Only
    full images reach the new keys; nothing the merge would reject as 'partial update of a row
    that does not exist'; the topic ends equal to the table."""
    env = pg_env
    env.sql("CREATE TABLE docs (doc_id int PRIMARY KEY, title text, body text)")
    env.add_jobs()
    env.tap_until_end()
    env.sql(f"INSERT INTO docs SELECT g, 't' || g, {BIG} FROM generate_series(1, 10) g")
    env.tap_until_end()
    env.sql("UPDATE docs SET doc_id = doc_id + 100 WHERE doc_id <= 5",  # 101..105
            "UPDATE docs SET title = 'moved, then changed' WHERE doc_id = 101",
            "DELETE FROM docs WHERE doc_id IN (101, 102)",  # gone when the tap reads them
            "UPDATE docs SET doc_id = 203 WHERE doc_id = 103",  # moved on again
            "UPDATE docs SET title = 'moved twice' WHERE doc_id = 203",
            "DELETE FROM docs WHERE doc_id = 105",
            f"INSERT INTO docs VALUES (105, 'a new row at a gone key', {BIG})",
            "UPDATE docs SET title = 'the new row, changed' WHERE doc_id = 105",
            "UPDATE docs SET doc_id = 6 WHERE doc_id = 6")  # a key update to itself
    tap = env.tap_until_end()
    assert tap.stats.errors == 0 and not tap.stopped
    events = _events(env, "docs")
    assert _partial_updates_of_missing_rows(events) == []
    assert env.assert_equal("docs") == 8  # 6..10, 104, 105, 203
    # every row ends with its body: the moved ones were read whole
    lake = env.oracle("docs")
    assert all(len(row["body"]) == 9600 for row in lake.values())
    # the fast path is back once no key is gone any more
    env.sql("UPDATE docs SET title = 'later' WHERE doc_id = 7")
    again = env.tap_until_end()
    assert again.stats.messages == 1 and not again._slow


def test_a_stored_generated_column_is_left_out_of_snapshot_and_stream_alike(pg_env) -> None:
    """#50.11: pgoutput (PostgreSQL 15) does not send stored generated columns; the catalog
    lists them. The table flows without the column, from the snapshot and the stream."""
    env = pg_env
    env.sql("CREATE TABLE lines (line_id int PRIMARY KEY, qty int, price numeric(8,2), "
            "total numeric(12,2) GENERATED ALWAYS AS (qty * price) STORED, note text)",
            "INSERT INTO lines (line_id, qty, price, note) VALUES (1, 2, 3.50, 'before')")
    jobs = env.add_jobs()
    assert jobs["public_lines"]["row_key"] == ["line_id"]
    env.bootstrap_all()
    env.sql("INSERT INTO lines (line_id, qty, price, note) VALUES (2, 5, 1.25, 'streamed')",
            "UPDATE lines SET qty = 7 WHERE line_id = 1")
    tap = env.tap_until_end()
    assert not tap.stopped and tap.stats.errors == 0
    fields = [n for n, _t in env.decoder("lines").schema.payload]
    assert "total" not in fields and "note" in fields
    assert env.assert_equal("lines") == 2
    assert env.oracle("lines")["1"]["qty"] == 7


def test_tables_dropped_or_renamed_while_the_tap_is_behind(pg_env) -> None:
    """#50.12: shapes come from the stream's Relation messages and the relation oid, not
    today's catalog by name: a table dropped before the tap reads its changes does not stop
    the tap, and a rename-and-swap never gives one table the other's keys: the swapped names
    lose their old rows in the lake and stop, saying to bootstrap them."""
    env = pg_env
    env.sql("CREATE TABLE a (id int PRIMARY KEY, v text)",
            "CREATE TABLE b (code text PRIMARY KEY, n int)",
            "CREATE TABLE c (c_id int PRIMARY KEY, w text)")
    env.add_jobs()
    env.tap_until_end()
    env.sql("INSERT INTO a VALUES (1, 'a1'), (2, 'a2')", "INSERT INTO b VALUES ('x', 1)",
            "INSERT INTO c VALUES (1, 'c1')")
    env.tap_until_end()
    # behind: more rows, c dropped, a and b swapped by renames, then rows under the new names
    env.sql("INSERT INTO a VALUES (3, 'a3')", "INSERT INTO b VALUES ('y', 2)",
            "INSERT INTO c VALUES (2, 'c2')", "UPDATE c SET w = 'c1!' WHERE c_id = 1",
            "DROP TABLE c",
            "ALTER TABLE a RENAME TO swap", "ALTER TABLE b RENAME TO a",
            "ALTER TABLE swap RENAME TO b",
            "INSERT INTO a VALUES ('z', 3)", "INSERT INTO b VALUES (4, 'a4')")
    tap = env.tap_until_end()  # before: UndefinedTable for c, at every start
    assert {r["c_id"]: r["w"] for r in env.oracle("c").values()} == {1: "c1!", 2: "c2"}
    # the changes before the swap were keyed by each table's own key
    assert sorted(e["_row_key"] for e in _events(env, "a") if not e["_is_deleted"]) == \
        ["1", "2", "3"]
    assert sorted(e["_row_key"] for e in _events(env, "b") if not e["_is_deleted"]) == \
        ["x", "y"]
    for name, was in (("a", "b"), ("b", "a")):
        error = tap.stopped[f"public.{name}"]["error"]
        assert f"table public.{name} is now the table that was public.{was}" in error
        assert f"sluice bootstrap {env.source} public.{name}" in error
        assert env.oracle(name) == {}  # the former table's rows deleted
    # the stops hold: the next run publishes nothing of them, and keeps c's rows
    env.sql("INSERT INTO a VALUES ('w', 5)")
    again = env.tap_until_end()
    assert set(again.stopped) == {"public.a", "public.b"} and again.stats.messages == 0


def test_a_table_dropped_and_created_again_loses_its_old_rows_then_flows(pg_env) -> None:
    """What to build 2: DROP TABLE and CREATE TABLE of the same name (a new relation oid),
    published from its CREATE (a publication FOR ALL TABLES): the old rows are deleted from
    the lake (as TRUNCATE), the new table's rows flow, as a new schema version when the
    shape only adds columns; a shape the old lake table cannot take stops the table, saying
    why and what to do."""
    env = pg_env
    env.sql("CREATE TABLE r (id int PRIMARY KEY, v text)",
            f"CREATE PUBLICATION every_{env.database} FOR ALL TABLES")
    env.write_config(publication=f"every_{env.database}")
    env.add_jobs()
    env.tap_until_end()
    env.sql("INSERT INTO r SELECT g, 'old' || g FROM generate_series(1, 20) g")
    env.tap_until_end()
    assert env.assert_equal("r") == 20
    env.sql("DROP TABLE r", "CREATE TABLE r (id int PRIMARY KEY, v text, extra int)",
            "INSERT INTO r SELECT g, 'new' || g, g FROM generate_series(15, 24) g",
            "UPDATE r SET extra = 0 WHERE id = 15")
    tap = env.tap_until_end()
    assert not tap.stopped and tap.stats.errors == 0
    env.add_jobs()  # the job reads with the new version
    assert env.assert_equal("r") == 10  # 15..24, none of the old rows
    assert sorted(p.name for p in (env.tmp / "registry" / "public.r").glob("*.avsc")) == \
        ["1.avsc", "2.avsc"]
    # again, with a column the old lake table cannot hold: stopped, saying why and what to do
    env.sql("DROP TABLE r", "CREATE TABLE r (id int PRIMARY KEY, v int)",
            "INSERT INTO r VALUES (1, 1)")
    tap = env.tap_until_end()
    error = tap.stopped["public.r"]["error"]
    assert "dropped and created again" in error and "changed type of v" in error, error
    assert env.oracle("r") == {}  # the old rows deleted before it stopped


def test_a_widening_type_change_flows_as_a_new_schema_version(pg_env) -> None:
    """What to build 2: varchar(n) -> text and int -> bigint are the same Avro types (no new
    version); a larger numeric precision is a new version, not a stop."""
    env = pg_env
    env.sql("CREATE TABLE w (id int PRIMARY KEY, name varchar(10), n int, amount numeric(10,2))")
    env.add_jobs()
    env.tap_until_end()
    env.sql("INSERT INTO w VALUES (1, 'a', 1, 12345678.91)",
            "ALTER TABLE w ALTER COLUMN name TYPE text, ALTER COLUMN n TYPE bigint",
            "INSERT INTO w VALUES (2, repeat('b', 30), 9000000000, 1.5)",
            "ALTER TABLE w ALTER COLUMN amount TYPE numeric(14,2)",
            "INSERT INTO w VALUES (3, 'c', 3, 123456789012.34)",
            "UPDATE w SET amount = amount + 1 WHERE id = 1")
    tap = env.tap_until_end()
    assert not tap.stopped and tap.stats.errors == 0
    registry = sorted(p.name for p in (env.tmp / "registry" / "public.w").glob("*.avsc"))
    assert registry == ["1.avsc", "2.avsc"]
    env.add_jobs()
    assert env.assert_equal("w") == 3


def test_a_table_created_again_that_joined_the_publication_late_stops_for_a_bootstrap(
        pg_env) -> None:
    """sluice's own publication lists its tables: a table dropped and created again joins it
    only when the tap starts next, so its first rows are not in the stream. Its old rows are
    deleted from the lake and it stops, saying to bootstrap it; after the bootstrap it is equal
    to the table."""
    env = pg_env
    env.sql("CREATE TABLE r (id int PRIMARY KEY, v text)")
    env.add_jobs()
    env.tap_until_end()
    env.sql("INSERT INTO r SELECT g, 'old' || g FROM generate_series(1, 5) g")
    env.tap_until_end()
    env.sql("DROP TABLE r", "CREATE TABLE r (id int PRIMARY KEY, v text)",
            "INSERT INTO r VALUES (100, 'before it joined the publication')")
    env.tap_until_end()  # adds the new r to the publication
    env.sql("INSERT INTO r VALUES (101, 'after')")
    tap = env.tap_until_end()
    error = tap.stopped["public.r"]["error"]
    assert "dropped and created again" in error and "first rows are not in the stream" in error
    assert f"sluice bootstrap {env.source} public.r" in error
    assert env.oracle("r") == {}
    env.bootstrap_all("public.r")
    env.sql("INSERT INTO r VALUES (102, 'streamed')")
    tap = env.tap_until_end()
    assert not tap.stopped
    assert env.assert_equal("r") == 3


def test_truncate_of_one_partition_deletes_its_rows_only(pg_env) -> None:
    """#50.10: pgoutput does not publish a TRUNCATE of one partition (publish_via_partition_root);
    the tap's trigger on each partition puts it in the stream, and the tap deletes exactly
    that partition's rows. A TRUNCATE of the whole table still deletes every row once."""
    env = pg_env
    env.sql(*partitioned_events(" PARTITION BY HASH (id)"),  # two levels, hashed below
            "CREATE TABLE events_2024_a PARTITION OF events_2024 "
            "FOR VALUES WITH (MODULUS 2, REMAINDER 0)",
            "CREATE TABLE events_2024_b PARTITION OF events_2024 "
            "FOR VALUES WITH (MODULUS 2, REMAINDER 1)")
    env.add_jobs()
    env.tap_until_end()  # the publication, the slot and the triggers
    assert env.sql("SELECT count(*) FROM pg_trigger WHERE tgname = "
                   "'sluice_truncate_partition'")[0][0] == 3
    env.sql("INSERT INTO events SELECT g, DATE '2023-03-01' + g * 5, 'x' "
            "FROM generate_series(1, 120) g")  # 2023 and 2024 rows
    env.tap_until_end()
    env.sql("TRUNCATE events_2023",
            "INSERT INTO events VALUES (1000, '2023-06-01', 'after the truncate')",
            "TRUNCATE events_2024_b")
    tap = env.tap_until_end()
    assert not tap.stopped
    kept = env.sql("SELECT count(*) FROM events")[0][0]
    assert 0 < kept < 120
    assert env.assert_equal("events") == kept
    deletes = [e for e in _events(env, "events") if e["_is_deleted"]]
    assert len(deletes) == 120 + 1 - kept  # the truncated rows, each once
    env.sql("TRUNCATE events", "INSERT INTO events VALUES (1, '2024-02-02', 'new')")
    tap = env.tap_until_end()
    assert tap.stats.messages == kept + 1  # one delete per live row, then the insert
    assert env.assert_equal("events") == 1
    # a partition created since gets its trigger too
    env.sql("CREATE TABLE events_2025 PARTITION OF events FOR VALUES FROM ('2025-01-01') "
            "TO ('2026-01-01')", "INSERT INTO events VALUES (7, '2025-03-03', 'later')")
    env.tap_until_end()
    env.sql("TRUNCATE events_2025")
    env.tap_until_end()
    assert env.assert_equal("events") == 1


def test_an_update_beside_a_toasted_key_that_did_not_change(pg_env) -> None:
    """A primary key stored out of line (TOASTed) and left alone by an update: the server
    sends the old key and leaves the key out of the new row; the key is the old one's, the
    update a plain one (before: the key had no value, an error record per update)."""
    env = pg_env
    env.sql("CREATE TABLE kt (k text PRIMARY KEY, n int)",
            "ALTER TABLE kt ALTER COLUMN k SET STORAGE EXTERNAL")
    env.add_jobs()
    env.tap_until_end()
    env.sql("INSERT INTO kt SELECT repeat(md5(g::text), 80), g FROM generate_series(1, 3) g")
    env.tap_until_end()
    env.sql("UPDATE kt SET n = n * 10")
    tap = env.tap_until_end()
    assert tap.stats.errors == 0 and not tap.stopped
    assert sorted(r["n"] for r in env.oracle("kt").values()) == [10, 20, 30]
    assert env.assert_equal("kt") == 3


def test_a_gone_key_outlives_a_restart_of_the_tap(pg_env) -> None:
    """#50.4 across a restart: the tap stops right after the transaction of the key change
    whose row is gone; the next tap (from that checkpoint) still knows the new key is gone and
    drops the partial update the lake could not apply."""
    from python_ingest.sources.postgres.tap import PgTap

    env = pg_env
    tapped_docs(env)
    env.sql("UPDATE docs SET doc_id = 101 WHERE doc_id = 1",
            "UPDATE docs SET title = 'moved, then changed' WHERE doc_id = 101",
            "DELETE FROM docs WHERE doc_id = 101")

    class StopAfterTheKeyChange(PgTap):
        def _commit(self, msg) -> None:  # type: ignore[no-untyped-def]
            super()._commit(msg)
            if any(self._gone.values()):
                self.stop.set()

    settings = env.settings()
    first = StopAfterTheKeyChange(settings, settings.source(env.source))
    first.run(until_end=True)
    assert env.checkpoint()["gone"] == {"public.docs": ["101"]}
    env.tap_until_end()  # the partial update and the delete
    assert _partial_updates_of_missing_rows(_events(env, "docs")) == []
    assert env.assert_equal("docs") == 2
    assert "gone" not in env.checkpoint()


def test_a_partition_the_tap_may_not_guard_is_a_warning_with_the_statements(
        pg_env, caplog) -> None:
    """#50.10: a tap user that does not own the partitions cannot put the trigger on: the tap
    says so at start, naming each partition with the statements for its owner to run."""
    import logging

    env = pg_env
    env.sql("CREATE TABLE ev (id int, at date, PRIMARY KEY (id, at)) PARTITION BY RANGE (at)",
            "CREATE TABLE ev_2024 PARTITION OF ev FOR VALUES FROM ('2024-01-01') "
            "TO ('2025-01-01')",
            f"CREATE PUBLICATION pub_{env.database} FOR TABLE ev "
            "WITH (publish_via_partition_root = true)",
            f"DROP ROLE IF EXISTS tapper_{env.database}",
            f"CREATE ROLE tapper_{env.database} LOGIN REPLICATION",
            f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO tapper_{env.database}")
    env.write_config(user=f"tapper_{env.database}", publication=f"pub_{env.database}")
    env.add_jobs()
    with caplog.at_level(logging.WARNING, logger="python_ingest.sources.postgres.partitions"):
        env.tap_until_end()
    warned = [r.getMessage() for r in caplog.records if "cannot put the trigger "
              "sluice_truncate_partition" in r.getMessage()]
    assert len(warned) == 1, warned
    # nor create the event trigger guarding new partitions (#58.4): a superuser must
    assert [r for r in caplog.records if "cannot create the event trigger "
            "sluice_guard_partitions" in r.getMessage()]
    assert 'partition "public"."ev_2024"' in warned[0]
    assert ('CREATE TRIGGER sluice_truncate_partition AFTER TRUNCATE ON "public"."ev_2024"'
            in warned[0])
    assert not env.sql("SELECT 1 FROM pg_trigger WHERE tgname = 'sluice_truncate_partition'")
