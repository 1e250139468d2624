"""The PostgreSQL tap against a private cluster and the session's broker: changes into
topics, checkpoints, the slot confirmed behind them, replica identities, TRUNCATE, schema
changes, and the errors that tell the user what to do."""

from __future__ import annotations

import pytest

from tests.sources.postgres.support import BIG, partitioned_events
from tests.sources.postgres.support import decoded_events as _events

pytestmark = pytest.mark.postgres_source

ORDERS = """CREATE TABLE orders (
  id serial PRIMARY KEY, customer text NOT NULL, amount numeric(12,2), status varchar(20),
  updated_at timestamptz DEFAULT now())"""


def test_changes_reach_topics_and_the_checkpoint_confirms_the_slot(pg_env) -> None:
    env = pg_env
    env.sql(ORDERS)
    env.add_jobs()
    env.tap_until_end()  # creates the publication and the slot, nothing to publish yet
    env.sql("INSERT INTO orders (customer, amount, status) SELECT 'c' || g, g * 1.5, 'new' "
            "FROM generate_series(1, 50) g",
            "UPDATE orders SET status = 'paid', amount = amount + 1 WHERE id % 3 = 0",
            "DELETE FROM orders WHERE id % 5 = 0")
    with env.connect() as conn, conn.cursor() as cur:  # one transaction touching a row twice
        conn.autocommit = False
        cur.execute("UPDATE orders SET status = 'a' WHERE id = 1")
        cur.execute("UPDATE orders SET status = 'b' WHERE id = 1")
        cur.execute("UPDATE orders SET id = 1000 WHERE id = 2")  # a key change
        conn.commit()
    tap = env.tap_until_end()
    assert tap.stats.transactions >= 4 and tap.stats.errors == 0
    assert env.assert_equal("orders") == 40
    checkpoint = env.checkpoint()
    slot = env.sql("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                   f"WHERE slot_name = 'sluice_{env.source}'")[0][0]
    assert checkpoint["lsn"] == slot  # confirmed exactly where the checkpoint is
    again = env.tap_until_end()  # nothing new: nothing published again
    assert again.stats.messages == 0


def test_unchanged_toast_is_a_partial_update_never_a_null(pg_env) -> None:
    """REPLICA IDENTITY DEFAULT: an update that leaves a TOASTed value alone does not carry it;
    the event names the columns it sets and the merge keeps the value."""
    env = pg_env
    env.sql("CREATE TABLE docs (doc_id int PRIMARY KEY, title text, body text)",
            "CREATE TABLE docs_full (doc_id int PRIMARY KEY, title text, body text)",
            "ALTER TABLE docs_full REPLICA IDENTITY FULL")
    env.add_jobs()
    env.tap_until_end()
    for table in ("docs", "docs_full"):
        env.sql(f"INSERT INTO {table} SELECT g, 't' || g, {BIG} FROM generate_series(1, 5) g",
                f"UPDATE {table} SET title = 'changed' WHERE doc_id <= 3",
                f"UPDATE {table} SET body = 'small now' WHERE doc_id = 5")
    env.tap_until_end()
    assert len(env.sql("SELECT body FROM docs WHERE doc_id = 1")[0][0]) == 9600
    for table in ("docs", "docs_full"):
        assert env.assert_equal(table) == 5  # the oracle applies partial updates as the merge
    partial = [e for e in _events(env, "docs") if e["_changed_columns"] is not None]
    assert len(partial) == 3
    assert all("body" not in e["_changed_columns"] and e["body"] is None for e in partial)
    assert all(set(e["_changed_columns"]) == {"doc_id", "title"} for e in partial)
    # FULL: the old row holds the value, every update is whole
    assert all(e["_changed_columns"] is None for e in _events(env, "docs_full"))
    assert all(len(e["body"]) == 9600 for e in _events(env, "docs_full")
               if e["title"] == "changed")


def test_replica_identities_index_full_without_key_and_nothing(pg_env) -> None:
    from python_ingest.exceptions import TapError

    env = pg_env
    env.sql("CREATE TABLE by_index (code text NOT NULL, n int, note text)",
            "CREATE UNIQUE INDEX by_index_code ON by_index (code)",
            "ALTER TABLE by_index REPLICA IDENTITY USING INDEX by_index_code",
            "CREATE TABLE tags (tag text, n int)",  # no key at all: a multiset
            "ALTER TABLE tags REPLICA IDENTITY FULL")
    jobs = env.add_jobs()
    assert jobs["public_by_index"]["row_key"] == ["code"]
    assert jobs["public_tags"]["row_key"] == ["sluice_row_id"]
    env.tap_until_end()
    env.sql("INSERT INTO by_index SELECT 'k' || g, g, 'x' FROM generate_series(1, 20) g",
            "UPDATE by_index SET n = n * 10 WHERE n % 2 = 0",
            "UPDATE by_index SET code = 'renamed' WHERE code = 'k7'",
            "DELETE FROM by_index WHERE n % 5 = 0",
            "INSERT INTO tags VALUES ('a', 1), ('a', 1), ('a', 1), ('b', 2), (NULL, 3)",
            "DELETE FROM tags WHERE ctid = (SELECT min(ctid) FROM tags WHERE tag = 'a')",
            "UPDATE tags SET n = 20 WHERE tag = 'b'")
    env.tap_until_end()
    assert env.assert_equal("by_index") == 8  # the odd n but 5 and 15
    live = env.oracle("tags")
    def order(row: tuple) -> tuple:
        return (row[0] or "", row[1])

    assert sorted(((r["tag"], r["n"]) for r in live.values()), key=order) == \
        sorted(env.sql("SELECT tag, n FROM tags"), key=order)
    assert len(live) == 4
    # NOTHING: refused, naming the table and the statement that fixes it
    env.sql("CREATE TABLE events_log (at timestamptz, what text)",
            "ALTER TABLE events_log REPLICA IDENTITY NOTHING")
    with pytest.raises(TapError, match=r'ALTER TABLE "public"."events_log" REPLICA IDENTITY '
                                       r"FULL"):
        env.tap_until_end()


def test_truncate_deletes_every_row_and_later_rows_live(pg_env) -> None:
    env = pg_env
    env.sql(ORDERS)
    env.add_jobs()
    env.tap_until_end()
    env.sql("INSERT INTO orders (customer, amount) SELECT 'c' || g, g "
            "FROM generate_series(1, 30) g")
    env.tap_until_end()
    env.sql("TRUNCATE orders",
            "INSERT INTO orders (customer, amount) SELECT 'd' || g, g FROM generate_series(1, 7) g")
    tap = env.tap_until_end()
    assert tap.stats.messages == 30 + 7  # a delete per live row, then the inserts
    assert env.assert_equal("orders") == 7


def test_added_column_is_a_new_version_dropped_column_stops_the_table(pg_env) -> None:
    env = pg_env
    env.sql(ORDERS, "CREATE TABLE other (id int PRIMARY KEY, v text)")
    env.add_jobs()
    env.tap_until_end()
    env.sql("INSERT INTO orders (customer) VALUES ('a'), ('b')",
            "ALTER TABLE orders ADD COLUMN coupon varchar(20)",
            "INSERT INTO orders (customer, coupon) VALUES ('c', 'SPRING-ß')",
            "UPDATE orders SET coupon = 'X' WHERE customer = 'a'")
    tap = env.tap_until_end()
    assert not tap.stopped
    registry = sorted(p.name for p in (env.tmp / "registry" / "public.orders").glob("*.avsc"))
    assert registry == ["1.avsc", "2.avsc"]
    env.add_jobs()  # the job reads with the newest version
    assert env.assert_equal("orders") == 3
    env.sql("ALTER TABLE orders DROP COLUMN status",
            "INSERT INTO orders (customer) VALUES ('d')",
            "INSERT INTO other VALUES (1, 'still published')")
    tap = env.tap_until_end()
    assert "dropped or renamed column(s) status" in tap.stopped["public.orders"]["error"]
    assert env.checkpoint()["stopped"]["public.orders"]
    assert env.assert_equal("other") == 1  # the other table goes on


def test_clear_errors_for_missing_replication_and_a_lost_slot(pg_env) -> None:
    from python_ingest.exceptions import TapError

    env = pg_env
    env.sql(ORDERS, "CREATE ROLE plain LOGIN", "GRANT SELECT ON orders TO plain")
    env.write_config(user="plain")
    with pytest.raises(TapError, match="lacks the REPLICATION attribute: run ALTER ROLE plain "
                                       "REPLICATION"):
        env.tap_until_end()
    env.write_config(user="sluice")
    env.add_jobs()
    env.tap_until_end()
    from python_ingest.sources.postgres import server

    settings = env.settings()
    conn = server.connect(settings.source(env.source))
    server.wait_inactive(conn, settings.source(env.source))
    conn.close()
    env.sql(f"SELECT pg_drop_replication_slot('sluice_{env.source}')")
    with pytest.raises(TapError, match=r"slot sluice_\w+ is gone .*`sluice bootstrap \w+ all`"):
        env.tap_until_end()
    env.bootstrap_all()  # what the message says: a new slot, every table copied again
    env.sql("INSERT INTO orders (customer) VALUES ('after')")
    env.tap_until_end()
    assert env.assert_equal("orders") == 1


def test_status_shows_the_slot_lag_and_warns_past_the_threshold(pg_env) -> None:
    import json

    from tests.conftest import sluice_cmd

    env = pg_env
    env.sql(ORDERS)
    env.write_config(slot_lag_warn_bytes=1000)
    env.tap_until_end()
    env.sql("INSERT INTO orders (customer) SELECT 'c' || g FROM generate_series(1, 2000) g")
    done = sluice_cmd(env.config, "status", "--json")
    assert done.returncode == 0, done.stderr
    source = json.loads(done.stdout)["sources"][env.source]
    assert source["retained_bytes"] > 1000 and "warning" in source, source
    assert source["confirmed_lsn"] == source["checkpoint_lsn"]
    text = sluice_cmd(env.config, "status").stdout
    assert f"source {env.source} (postgres): slot sluice_{env.source} idle" in text
    assert "WARNING: the slot holds" in text


def test_a_server_without_logical_wal_is_refused_saying_what_to_set(pg_env) -> None:
    from python_ingest.exceptions import TapError
    from python_ingest.sinks.pgserver import LocalPostgres

    plain = LocalPostgres().start()  # wal_level: replica (the default)
    try:
        pg_env.write_config(port=plain.port, database="postgres")
        with pytest.raises(TapError, match="wal_level is 'replica'.*ALTER SYSTEM SET "
                                           "wal_level = logical"):
            pg_env.tap_until_end()
    finally:
        plain.stop()


def test_a_large_transaction_over_several_tables(pg_env) -> None:
    """One transaction of 5k changes over two tables (decoded by the server at its commit,
    spilled to disk past logical_decoding_work_mem): every change, in order."""
    env = pg_env
    env.sql(ORDERS, "CREATE TABLE lines (order_id int, n int, qty int, PRIMARY KEY (order_id, n))")
    env.add_jobs()
    env.tap_until_end()
    with env.connect() as conn, conn.cursor() as cur:
        conn.autocommit = False
        cur.execute("INSERT INTO orders (customer, amount) SELECT 'c' || g, g "
                    "FROM generate_series(1, 1000) g")
        cur.execute("INSERT INTO lines SELECT o, n, n FROM generate_series(1, 1000) o, "
                    "generate_series(1, 3) n")
        cur.execute("UPDATE lines SET qty = qty + 10 WHERE n = 2")
        cur.execute("DELETE FROM orders WHERE id % 4 = 0")
        conn.commit()
    tap = env.tap_until_end()
    assert tap.stats.transactions == 1 and tap.stats.row_changes == 1000 + 3000 + 1000 + 250
    assert env.assert_equal("orders") == 750
    assert env.assert_equal("lines") == 3000
    refs = [r["_ref_key"] for r in _events(env, "lines")]
    assert len(set(refs)) == len(refs) == 4000  # each change its own position


def test_a_partitioned_table_is_one_topic_and_a_retyped_column_stops_its_table(pg_env) -> None:
    """(int to bigint is no change: both are an Avro long; int to text is.)"""
    env = pg_env
    env.sql(*partitioned_events(),
            "INSERT INTO events VALUES (1, '2023-05-01', 'old'), (2, '2024-05-01', 'new')",
            "CREATE TABLE sizes (id int PRIMARY KEY, n int)")
    jobs = env.add_jobs()
    assert set(jobs) == {"public_events", "public_sizes"}  # the partitions are not jobs
    env.bootstrap_all()
    env.sql("INSERT INTO events VALUES (3, '2023-07-01', 'x'), (4, '2024-07-01', 'y')",
            "UPDATE events SET what = 'moved', at = '2024-02-02' WHERE id = 1",
            "INSERT INTO sizes VALUES (1, 10)",
            "ALTER TABLE sizes ALTER COLUMN n TYPE text",
            "INSERT INTO sizes VALUES (2, 20)")
    tap = env.tap_until_end()
    assert env.assert_equal("events") == 4
    assert "changed type of n" in tap.stopped["public.sizes"]["error"]


def test_the_commands_print_jobs_bootstrap_and_tap(pg_env) -> None:
    import yaml

    from tests.conftest import sluice_cmd

    env = pg_env
    env.sql(ORDERS, "INSERT INTO orders (customer) SELECT 'c' || g FROM generate_series(1, 30) g")
    done = sluice_cmd(env.config, "tap", env.source, "--print-jobs")
    assert done.returncode == 0, done.stderr
    jobs = yaml.safe_load(done.stdout)["jobs"]
    assert jobs["public_orders"]["topic"] == env.topic("orders")
    assert jobs["public_orders"]["row_key"] == ["id"]
    env.jobs.update(jobs)
    env.write_config()
    done = sluice_cmd(env.config, "bootstrap", env.source, "all")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "public.orders: 30 rows" in done.stdout
    env.sql("DELETE FROM orders WHERE id <= 10")
    done = sluice_cmd(env.config, "tap", env.source, "--until-end")
    assert done.returncode == 0 and "10 row changes" in done.stdout, done.stdout + done.stderr
    assert env.assert_equal("orders") == 20


def test_streamed_large_transactions_with_savepoints_and_aborts(pg_env) -> None:
    """Protocol 2 (``streaming: true``): transactions past logical_decoding_work_mem arrive in
    stream blocks before they commit, interleaved with small ones; only what committed lands,
    a rolled-back savepoint's changes and an aborted transaction's do not."""
    env = pg_env
    env.sql(ORDERS, "ALTER SYSTEM SET logical_decoding_work_mem = '64kB'",
            "SELECT pg_reload_conf()")
    try:
        env.write_config(streaming=True)
        env.add_jobs()
        env.tap_until_end()
        with env.connect() as big, env.connect() as small:
            big.autocommit = False
            with big.cursor() as cur, small.cursor() as other:
                cur.execute("INSERT INTO orders (customer, amount) SELECT 'big' || g, g "
                            "FROM generate_series(1, 3000) g")
                other.execute("INSERT INTO orders (customer) VALUES ('small, committed first')")
                cur.execute("SAVEPOINT s1")
                cur.execute("UPDATE orders SET status = 'rolled back' WHERE customer LIKE 'big%'")
                cur.execute("ROLLBACK TO SAVEPOINT s1")
                cur.execute("UPDATE orders SET status = 'kept' WHERE id % 2 = 0")
            big.commit()
            with big.cursor() as cur:
                cur.execute("INSERT INTO orders (customer) SELECT 'aborted' || g "
                            "FROM generate_series(1, 3000) g")
            big.rollback()
        tap = env.tap_until_end()
        assert tap.stats.transactions == 2
        assert tap.streamed == {"committed": 1, "aborted": 1}  # the two large ones
        assert env.assert_equal("orders") == 3001
        assert not env.sql("SELECT 1 FROM orders WHERE status = 'rolled back'")
    finally:
        env.sql("ALTER SYSTEM RESET logical_decoding_work_mem", "SELECT pg_reload_conf()")
