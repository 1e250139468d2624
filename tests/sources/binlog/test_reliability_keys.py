"""Composite row keys (issue #9.7): ('a|b', 'c') and ('a', 'b|c') are two rows, and a table
registered with the old '|'-joined key stops with a clear error instead of merging them."""

from __future__ import annotations

import pytest

from python_ingest.sources.binlog.server import table_shape
from python_ingest.sources.tap.registry import PRIMARY, KeyChoice, Registry, TableShape


def _rows(env, table: str) -> dict[tuple[str, str], int]:
    return {(row["a"], row["b"]): row["v"] for row in env.oracle(table).values()}


@pytest.mark.reliability
def test_composite_keys_holding_the_separator_stay_distinct_rows(tap_env) -> None:
    env = tap_env
    env.sql("CREATE TABLE c (a VARCHAR(10), b VARCHAR(10), v INT, PRIMARY KEY (a, b))")
    jobs = env.add_jobs()
    env.tap_until_end()
    env.sql("INSERT INTO c VALUES ('a|b', 'c', 1), ('a', 'b|c', 2), ('a\\\\', '|c', 3)",
            "UPDATE c SET v = 20 WHERE a = 'a'", "INSERT INTO c VALUES ('x', 'y', 4)")
    env.tap_until_end()
    assert _rows(env, "c") == {("a|b", "c"): 1, ("a", "b|c"): 20, ("a\\", "|c"): 3,
                               ("x", "y"): 4}
    keys = {key for key, _value in env.messages("c")}
    assert len(keys) == 4  # one Kafka key (and lake row key) per row
    job = next(j for j in jobs.values() if j["topic"] == env.topic("c"))
    assert job["row_key"] == ["sluice_row_id"]


@pytest.mark.reliability
def test_a_table_registered_with_the_joined_key_stops_on_an_ambiguous_value(tap_env) -> None:
    env = tap_env
    env.sql("CREATE TABLE old (a VARCHAR(10), b VARCHAR(10), PRIMARY KEY (a, b))")
    with env.server.root(env.database) as conn:  # registered as before #9.7: joined with '|'
        shape = table_shape(conn, env.database, "old")
    legacy = TableShape(shape.db, shape.table, shape.columns, KeyChoice(PRIMARY, ("a", "b")))
    Registry(env.tmp / "registry" / f"{env.database}.old").register(legacy)
    jobs = env.add_jobs()  # keeps the registered key: nothing migrates silently
    job = next(j for j in jobs.values() if j["topic"] == env.topic("old"))
    assert job["row_key"] == ["a", "b"]
    env.tap_until_end()
    env.sql("INSERT INTO old VALUES ('x', 'y')")
    env.tap_until_end()
    env.sql("INSERT INTO old VALUES ('p|q', 'r')", "INSERT INTO old VALUES ('s', 't')")
    tap = env.tap_until_end()
    stop = tap.stopped.get(f"{env.database}.old")
    assert stop is not None, "an ambiguous key must stop the table"
    assert "'|'" in stop["error"] and "sluice_row_id" in stop["error"], stop["error"]
    assert "bootstrap" in stop["error"], stop["error"]
    assert [k for k, _v in env.messages("old")] == [b"x|y"]  # nothing after it published
