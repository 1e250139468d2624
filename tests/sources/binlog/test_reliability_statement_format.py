"""Issue #58: a session's own ``binlog_format=STATEMENT`` or ``MIXED`` writes its DML as query
events holding the statement; the global ROW is all the tap checks at start.

Before the fix the tap took such a statement for a transaction end with nothing to do: the
rows it changed were lost without a word and the checkpoint moved past them. Now a statement
whose target is a tapped table stops that table naming the setting (other tables flow on, the
stop is in the checkpoint); an unconditional ``DELETE FROM t`` deletes every row (published as
a TRUNCATE, as a MEMORY table emptied by a restart is on servers that write it so); a
statement whose tables cannot be read from it (a multi-table UPDATE) stops the whole tap, its
checkpoint left before; a statement on an untapped table stops nothing. All on what the real
server writes (the session ``mariadb`` fixture), checked on the topics and the checkpoint.
"""

from __future__ import annotations

from typing import Any

import pytest

from python_ingest.exceptions import TapError
from python_ingest.sources.binlog import ddl, statements

pytestmark = [pytest.mark.reliability]

TABLES = ("CREATE TABLE ti (id INT PRIMARY KEY, a INT)",
          "CREATE TABLE tu (id INT PRIMARY KEY, a INT)",
          "CREATE TABLE td (id INT PRIMARY KEY, a INT)",
          "CREATE TABLE flows (id INT PRIMARY KEY, a INT)",
          "CREATE TABLE emptied (id INT PRIMARY KEY, a INT)")
ROWS = tuple(f"INSERT INTO {t} VALUES (1, 1), (2, 2), (3, 3)"
             for t in ("ti", "tu", "td", "flows", "emptied"))
SETTING = "binlog_format=STATEMENT/MIXED in a session"


def _untapped(env: Any, *statements: str) -> None:
    """Run ``statements`` in an untapped database (its default database), in statement
    format."""
    other = f"{env.database}_untapped"
    with env.server.root() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {other}")
        cur.execute(f"USE {other}")
        for statement in ("CREATE TABLE IF NOT EXISTS u (id INT PRIMARY KEY, a INT)",
                          "CREATE TABLE IF NOT EXISTS v (id INT PRIMARY KEY, a INT)",
                          "SET SESSION binlog_format = STATEMENT", *statements):
            cur.execute(statement)


@pytest.mark.e2e
def test_statement_format_dml_stops_its_table_naming_the_setting(tap_env: Any) -> None:
    env = tap_env
    env.start_tapping(*TABLES)
    _untapped(env, "INSERT INTO u VALUES (1, 1), (2, 2)", "INSERT INTO v VALUES (1, 1)",
              "UPDATE u JOIN v ON u.id = v.id SET u.a = 2",  # its tables unread: not tapped
              "DELETE FROM u WHERE id = 2")
    env.sql(*ROWS,
            "SET SESSION binlog_format = STATEMENT",
            "INSERT INTO ti VALUES (4, 4)",
            f"UPDATE {env.database}.tu SET a = 20 WHERE id = 2",
            "DELETE FROM td WHERE id = 3",
            f"INSERT INTO {env.database}_untapped.u VALUES (3, 3)",  # untapped: no stop
            "DELETE FROM emptied",  # every row: as a TRUNCATE
            "SET SESSION binlog_format = MIXED",
            "INSERT INTO flows VALUES (4, 4)",  # deterministic: MIXED writes the statement
            "SET SESSION binlog_format = ROW",
            "INSERT INTO flows VALUES (5, 5)", "UPDATE flows SET a = 10 WHERE id = 1",
            "INSERT INTO ti VALUES (6, 6)", "UPDATE tu SET a = 30 WHERE id = 1")
    tap = env.tap_until_end()
    db = env.database
    assert sorted(tap.stopped) == [f"{db}.{t}" for t in ("flows", "td", "ti", "tu")]
    for table, verb in (("ti", "INSERT"), ("tu", "UPDATE"), ("td", "DELETE"),
                        ("flows", "INSERT")):
        reason = tap.stopped[f"{db}.{table}"]["error"]
        assert reason.startswith(f"{verb} statement at ") and SETTING in reason, reason
        assert f"sluice bootstrap {env.source} {db}.{table}" in reason, reason
    checkpoint = env.checkpoint()
    assert checkpoint is not None and sorted(checkpoint["stopped"]) == sorted(tap.stopped)
    for table in ("ti", "tu", "td", "flows"):  # nothing after the statement is published
        assert len(env.messages(table)) == 3, table
    assert env.assert_equal("emptied") == 0  # the unconditional DELETE deleted every row


@pytest.mark.e2e
def test_other_tables_keep_flowing_past_a_stopped_one(tap_env: Any) -> None:
    env = tap_env
    env.start_tapping(*TABLES)
    env.sql(*ROWS, "SET SESSION binlog_format = STATEMENT", "UPDATE ti SET a = 7",
            "SET SESSION binlog_format = ROW", "UPDATE flows SET a = 8 WHERE id = 2",
            "INSERT INTO flows VALUES (9, 9)", "DELETE FROM td WHERE id = 1")
    tap = env.tap_until_end()
    assert list(tap.stopped) == [f"{env.database}.ti"]
    assert SETTING in tap.stopped[f"{env.database}.ti"]["error"]
    assert env.assert_equal("flows") == 4 and env.assert_equal("td") == 2
    assert env.sql("SELECT COUNT(*) FROM ti WHERE a = 7") == [(3,)]
    assert len(env.messages("ti")) == 3  # the lake keeps ti as it was: stopped, not changed
    env.sql("INSERT INTO flows VALUES (10, 10)")
    tap = env.tap_until_end()  # a restart keeps the stop and goes on with the others
    assert list(tap.stopped) == [f"{env.database}.ti"] and env.assert_equal("flows") == 5


@pytest.mark.e2e
def test_a_statement_whose_tables_cannot_be_read_stops_the_tap(tap_env: Any) -> None:
    env = tap_env
    env.start_tapping(*TABLES)
    env.sql(*ROWS)
    env.tap_until_end()
    before = env.checkpoint()
    assert before is not None
    env.sql("SET SESSION binlog_format = STATEMENT",
            "UPDATE tu JOIN td ON tu.id = td.id SET tu.a = td.a + 100",
            "SET SESSION binlog_format = ROW", "INSERT INTO flows VALUES (4, 4)")
    for _ in range(2):  # and again on a restart: never passed
        with pytest.raises(TapError, match="binlog_format=STATEMENT/MIXED in a session") as r:
            env.tap_until_end()
        assert "UPDATE statement" in str(r.value) and "bootstrap" in str(r.value)
        assert env.checkpoint() == before


def test_statements_are_classified_conservatively() -> None:
    """The parser alone: targets read only where the text names them for sure."""
    c = statements.classify
    assert c("INSERT IGNORE INTO `a b`.`t`(id) VALUES (1)", "m") == \
        statements.Dml("INSERT", (("a b", "t"),))
    assert c("REPLACE t SET id = 1", "m") == statements.Dml("REPLACE", (("m", "t"),))
    assert c("UPDATE t AS x SET x.a = 1 WHERE x.id IN (SELECT id FROM s)", "m") == \
        statements.Dml("UPDATE", (("m", "t"),))
    assert c("DELETE FROM t WHERE id = 1", "m") == statements.Dml("DELETE", (("m", "t"),))
    assert c("DELETE FROM `m`.`mem`", "") == statements.Dml("DELETE", (("m", "mem"),), True)
    assert c("DELETE FROM t LIMIT 1", "m") == statements.Dml("DELETE", (("m", "t"),))
    assert c("CREATE TABLE z SELECT 1 AS id", "m") == \
        statements.Dml("CREATE TABLE ... SELECT", (("m", "z"),))
    for unknown in ("DELETE a FROM a JOIN b ON a.id = b.id", "DELETE FROM a USING a, b",
                    "UPDATE a, b SET a.x = b.x", "WITH c AS (SELECT 1) UPDATE t SET a = 1",
                    "SELECT f()", "CALL p()", "DO f()", "INSERT INTO t VALUES (1)"):
        found = c(unknown, "m" if "INTO t" not in unknown else "")
        assert found is not None and found.tables is None, unknown
    for not_dml in ("BEGIN", "COMMIT", "XA COMMIT 'x'", "TRUNCATE TABLE t", "SAVEPOINT s",
                    "CREATE TABLE `z` (`select` INT, b VARCHAR(9) DEFAULT 'select')",
                    "ALTER TABLE t ADD COLUMN c INT", "GRANT SELECT ON *.* TO 'u'@'%'"):
        assert c(not_dml, "m") is None, not_dml
    from python_ingest.sources.binlog.tap import ends_transaction

    assert not ends_transaction("INSERT INTO t VALUES (1)")  # its XID or COMMIT ends it
    assert ends_transaction("COMMIT") and ends_transaction("CREATE TABLE z SELECT 1 AS id")
    # MariaDB 10.11 empties a MEMORY table after a restart with this (a TRUNCATE already)
    assert ddl.parse("TRUNCATE TABLE `m`.`mem` /* generated by server for memory table after "
                     "a restart */", "m") == [ddl.TableDdl("truncate", ("m", "mem"))]
