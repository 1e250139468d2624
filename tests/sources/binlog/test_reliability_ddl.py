"""DDL the tap must not ignore (issue #9.8): TRUNCATE deletes every lake row through the topic,
DROP TABLE and RENAME TABLE stop the table's publishing with a clear error; DROP DATABASE (or
SCHEMA) is a DROP TABLE of each of its tables the tap follows (issue #35.7)."""

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
def test_drop_table_stops_its_publishing_and_keeps_the_lake(tap_env) -> None:
    env = tap_env
    env.sql("CREATE TABLE d (id INT PRIMARY KEY)", "CREATE TABLE other (id INT PRIMARY KEY)")
    env.add_jobs()
    env.tap_until_end()
    env.sql("INSERT INTO d VALUES (1), (2)")
    env.tap_until_end()
    env.sql("DROP TABLE d", "CREATE TABLE d (id INT PRIMARY KEY)", "INSERT INTO d VALUES (7)",
            "INSERT INTO other VALUES (1)",
            # gone before the tap reads its rows: they are published, then it stops
            "CREATE TABLE g (id INT PRIMARY KEY)", "INSERT INTO g VALUES (5)", "DROP TABLE g")
    tap = env.tap_until_end()
    assert len(env.messages("g")) == 1  # its insert: no crash on the table being gone
    assert "DROP TABLE" in tap.stopped[f"{env.database}.g"]["error"]
    stop = tap.stopped.get(f"{env.database}.d")
    assert stop is not None and "DROP TABLE" in stop["error"] and "bootstrap" in stop["error"]
    assert sorted(env.oracle("d")) == ["1", "2"]  # kept as it was; the new table's row not
    assert sorted(env.oracle("other")) == ["1"]  # the other tables go on
    assert env.checkpoint()["stopped"][f"{env.database}.d"]["error"] == stop["error"]


@pytest.mark.reliability
def test_drop_database_stops_each_followed_table_and_keeps_the_lake(tap_env) -> None:
    env = tap_env
    db = env.database
    env.sql("CREATE TABLE a (id INT PRIMARY KEY)", "CREATE TABLE b (id INT PRIMARY KEY, v TEXT)",
            "CREATE TABLE quiet (id INT PRIMARY KEY)")  # registered by add_jobs, no changes
    env.add_jobs()
    env.tap_until_end()
    env.sql("INSERT INTO a VALUES (1), (2)", "INSERT INTO b VALUES (1, 'x')",
            # gone before the tap reads its rows: they are published, then it stops
            "CREATE TABLE g (id INT PRIMARY KEY)", "INSERT INTO g VALUES (5)")
    with env.server.root() as conn, conn.cursor() as cur:
        cur.execute(f"DROP SCHEMA IF EXISTS /* synonym */ `{db}`")
        cur.execute(f"DROP DATABASE IF EXISTS `{db}`")  # gone already: nothing more to stop
        cur.execute(f"CREATE DATABASE {db}")  # again under that name: its tables stay stopped
        cur.execute(f"CREATE TABLE {db}.a (id INT PRIMARY KEY)")
        cur.execute(f"INSERT INTO {db}.a VALUES (7)")
    tap = env.tap_until_end()
    for table in ("a", "b", "quiet", "g"):
        stop = tap.stopped.get(f"{db}.{table}")
        assert stop is not None, (table, tap.stopped)
        assert f"DROP DATABASE {db}" in stop["error"] and "bootstrap" in stop["error"], stop
        assert env.checkpoint()["stopped"][f"{db}.{table}"]["error"] == stop["error"]
    assert sorted(env.oracle("a")) == ["1", "2"]  # kept as it was; the new table's row not
    assert len(env.messages("a")) == 2 and sorted(env.oracle("b")) == ["1"]
    assert len(env.messages("g")) == 1


@pytest.mark.reliability
def test_rename_table_stops_both_names_clearly(tap_env) -> None:
    env = tap_env
    env.sql("CREATE TABLE r (id INT PRIMARY KEY)")
    env.add_jobs()
    env.tap_until_end()
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
])
def test_table_ddl_is_recognised(query: str, expected: list) -> None:
    found = [(s.what, s.table, s.to) for s in ddl.parse(query, "db")]
    assert found == expected
