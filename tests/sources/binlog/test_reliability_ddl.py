"""DDL the tap must not ignore (issue #9.8), followed in stream order (issue #50): TRUNCATE
deletes every lake row through the topic; DROP TABLE does too, and a table created again under
its name flows from its CREATE; DROP DATABASE (or SCHEMA) is a DROP TABLE of each of its
tables the tap follows (issue #35.7); a drop of what the stream dropped already does nothing;
RENAME TABLE stops the table's publishing with a clear error."""

from __future__ import annotations

from collections import Counter

import pytest

from python_ingest.sources.binlog import ddl


def _live(env, table: str) -> Counter[tuple]:
    """The topic's events applied in ref-key order (the merge), as a multiset of rows."""
    return Counter(tuple(sorted((k, v) for k, v in row.items() if k != "sluice_row_id"))
                   for row in env.oracle(table).values())


def _source(env, table: str, columns: str) -> Counter[tuple]:
    names = [c.strip() for c in columns.split(",")]
    return Counter(tuple(sorted(zip(names, row, strict=True)))
                   for row in env.sql(f"SELECT {columns} FROM {table}"))


@pytest.mark.reliability
def test_truncate_deletes_every_row_through_the_topic(tap_env) -> None:
    env = tap_env
    env.sql("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20) NOT NULL)",
            "CREATE TABLE dup (v VARCHAR(20))")  # no key: full-row identity, copies counted
    env.add_jobs()
    env.tap_until_end()
    env.sql("INSERT INTO t SELECT seq, CONCAT('v', seq) FROM seq_1_to_40",
            "UPDATE t SET v = 'changed' WHERE id <= 10", "DELETE FROM t WHERE id > 35",
            "INSERT INTO dup VALUES ('a'), ('a'), ('b')")
    env.tap_until_end()  # the truncate is read in a later run: the deletes come from the topic
    env.sql("TRUNCATE TABLE t", "TRUNCATE dup",
            "INSERT INTO t VALUES (1, 'again'), (2, 'again')", "INSERT INTO dup VALUES ('a')")
    tap = env.tap_until_end()
    assert not tap.stopped, tap.stopped
    assert env.assert_equal("t") == 2
    assert _live(env, "dup") == _source(env, "dup", "v") == Counter({(("v", "a"),): 1})
    decoder = env.decoder("t")
    deletes = [decoder.decode(value) for _key, value in env.messages("t")]
    deletes = [e for e in deletes if e["_is_deleted"] and e["_source"] == "mariadb"]
    assert len(deletes) == 5 + 35  # DELETE id > 35, then TRUNCATE: one delete per live row
    env.sql("TRUNCATE t")
    env.tap_until_end()
    env.tap_until_end()  # a repeat of the same position publishes nothing more
    assert env.oracle("t") == {}


@pytest.mark.reliability
def test_drop_table_deletes_its_rows_and_a_table_created_again_flows(tap_env) -> None:
    """Issue #50: a DROP of a live table deletes its lake rows (as TRUNCATE); the table
    created again under its name is published from its CREATE, no bootstrap; a drop of a
    table the stream dropped already does nothing; a stopped table that is dropped starts
    over; only a new shape the old lake table cannot take stops it, saying why."""
    env = tap_env
    db = env.database
    env.sql("CREATE TABLE d (id INT PRIMARY KEY)", "CREATE TABLE other (id INT PRIMARY KEY)",
            "CREATE TABLE s (id INT PRIMARY KEY, v INT)",
            "CREATE TABLE e (id INT PRIMARY KEY, v INT)")
    env.add_jobs()
    env.tap_until_end()
    env.sql("INSERT INTO d VALUES (1), (2)", "INSERT INTO s VALUES (1, 1)",
            "INSERT INTO e VALUES (1, 1)",
            "ALTER TABLE s DROP COLUMN v", "INSERT INTO s VALUES (2)")  # s stops here
    assert "dropped or renamed column(s) v" in env.tap_until_end().stopped[f"{db}.s"]["error"]
    env.sql("DROP TABLE d", "CREATE TABLE d (id INT PRIMARY KEY)", "INSERT INTO d VALUES (7)",
            "INSERT INTO other VALUES (1)",
            # gone before the tap reads its rows: its insert, then its delete
            "CREATE TABLE g (id INT PRIMARY KEY)", "INSERT INTO g VALUES (5)", "DROP TABLE g",
            "DROP TABLE IF EXISTS g", "DROP TABLE IF EXISTS never",  # nothing there: no-ops
            "DROP TABLE s", "CREATE TABLE s (id INT PRIMARY KEY, v INT)",
            "INSERT INTO s VALUES (3, 3)",
            "DROP TABLE e", "CREATE TABLE e (id VARCHAR(10) PRIMARY KEY)",
            "INSERT INTO e VALUES ('x')")
    tap = env.tap_until_end()
    assert set(tap.stopped) == {f"{db}.e"}, tap.stopped
    assert "incompatible schema change" in tap.stopped[f"{db}.e"]["error"]
    assert "Incompatible schema changes" in tap.stopped[f"{db}.e"]["error"]  # what to do
    assert env.oracle("e") == {}  # its old rows deleted by the drop, the new ones not published
    assert env.assert_equal("d") == 1 and sorted(env.oracle("d")) == ["7"]
    assert env.assert_equal("s") == 1 and sorted(env.oracle("s")) == ["3"]
    assert sorted(env.oracle("other")) == ["1"]  # the other tables go on
    assert [k for k, _v in env.messages("g")] == [b"5", b"5"]  # its insert, the drop's delete
    checkpoint = env.checkpoint()
    assert checkpoint["stopped"].keys() == {f"{db}.e"}
    assert checkpoint["existence"] == {f"{db}.g": False, f"{db}.never": False}
    assert len(env.messages("d")) == 2 + 2 + 1  # inserts, deletes of the drop, the new row
    env.tap_until_end()  # nothing more
    assert len(env.messages("d")) == 5 and len(env.messages("g")) == 2


@pytest.mark.reliability
def test_drop_database_deletes_each_followed_table_and_new_tables_flow(tap_env) -> None:
    """Issue #50 (was: every table stopped, #35.7): DROP DATABASE is a DROP TABLE of each of
    its tables; a repeat ``IF EXISTS`` drops nothing; the tables created again flow."""
    env = tap_env
    db = env.database
    env.sql("CREATE TABLE a (id INT PRIMARY KEY)", "CREATE TABLE b (id INT PRIMARY KEY, v TEXT)",
            "CREATE TABLE quiet (id INT PRIMARY KEY)")  # registered by add_jobs, no changes
    env.add_jobs()
    env.tap_until_end()
    env.sql("INSERT INTO a VALUES (1), (2)", "INSERT INTO b VALUES (1, 'x')",
            # gone before the tap reads its rows: they are published, then deleted
            "CREATE TABLE g (id INT PRIMARY KEY)", "INSERT INTO g VALUES (5)")
    with env.server.root() as conn, conn.cursor() as cur:
        cur.execute(f"DROP SCHEMA IF EXISTS /* synonym */ `{db}`")
        cur.execute(f"DROP DATABASE IF EXISTS `{db}`")  # gone already: nothing more
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.a (id INT PRIMARY KEY)")
        cur.execute(f"INSERT INTO {db}.a VALUES (7)")
        cur.execute(f"DROP TABLE IF EXISTS {db}.b")  # gone with its database: nothing
    tap = env.tap_until_end()
    assert not tap.stopped and not env.checkpoint()["stopped"], tap.stopped
    assert env.assert_equal("a") == 1 and sorted(env.oracle("a")) == ["7"]
    assert len(env.messages("a")) == 2 + 2 + 1  # inserts, the drop's deletes, the new row
    assert env.oracle("b") == {} and len(env.messages("b")) == 2
    assert [k for k, _v in env.messages("g")] == [b"5", b"5"]  # its insert, the drop's delete
    assert env.checkpoint()["existence"] == {f"{db}.": False, f"{db}.a": True}


@pytest.mark.reliability
def test_rename_table_stops_both_names_clearly(tap_env) -> None:
    env = tap_env
    env.start_tapping("CREATE TABLE r (id INT PRIMARY KEY)")
    env.sql("INSERT INTO r VALUES (1)")
    env.tap_until_end()
    env.sql("RENAME TABLE r TO r2", "INSERT INTO r2 VALUES (2)",
            "ALTER TABLE r2 RENAME TO r3", "INSERT INTO r3 VALUES (3)")
    tap = env.tap_until_end()
    old, new = (tap.stopped.get(f"{env.database}.{t}") for t in ("r", "r2"))
    assert old is not None and f"renamed to {env.database}.r2" in old["error"], tap.stopped
    assert new is not None and "bootstrap" in new["error"], tap.stopped
    assert f"{env.database}.r3" in tap.stopped
    assert sorted(env.oracle("r")) == ["1"]
    assert len(env.messages("r")) == 1  # nothing of r2 or r3 under r's topic


@pytest.mark.reliability
@pytest.mark.parametrize(("query", "expected"), [
    ("TRUNCATE TABLE t", [("truncate", ("db", "t"), None)]),
    ("truncate `s`.`we``ird`", [("truncate", ("s", "we`ird"), None)]),
    ("DROP TABLE IF EXISTS `a`,b.c /* generated by server */",
     [("drop", ("db", "a"), None), ("drop", ("b", "c"), None)]),
    ("DROP TEMPORARY TABLE IF EXISTS t", []),
    ("RENAME TABLE a TO a_old, `x`.new TO a",
     [("rename", ("db", "a"), ("db", "a_old")), ("rename", ("x", "new"), ("db", "a"))]),
    ("ALTER TABLE a RENAME AS b", [("rename", ("db", "a"), ("db", "b"))]),
    ("ALTER TABLE a ADD COLUMN renamed INT", []),
    ("DROP DATABASE shop", [("drop_database", ("shop", ""), None)]),
    ("drop schema if exists `we``ird` -- all of it", [("drop_database", ("we`ird", ""), None)]),
    ("DROP DATABASE IF EXISTS/**/`a.b`", [("drop_database", ("a.b", ""), None)]),
    ("DROP DATABASE a, b", []),
    ("CREATE TABLE t (id INT)", [("create", ("db", "t"), None)]),
    ("create table if not exists `s`.`x`(id int)", [("create", ("s", "x"), None)]),
    ("CREATE OR REPLACE TABLE t2 LIKE t", [("drop", ("db", "t2"), None),
                                           ("create", ("db", "t2"), None)]),
    ("CREATE TEMPORARY TABLE tmp (id INT)", []),
    ("CREATE TABLE t SELECT 1 AS id", [("create", ("db", "t"), None)]),
    ("CREATE DATABASE db", []),
])
def test_table_ddl_is_recognised(query: str, expected: list) -> None:
    found = [(s.what, s.table, s.to) for s in ddl.parse(query, "db")]
    assert found == expected
