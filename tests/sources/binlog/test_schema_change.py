"""Schema changes: an added column becomes a new schema version; an incompatible change stops
that table (with a clear error and its resume position) while the other tables go on."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from tests.sources.binlog.workload import Workload


@pytest.mark.e2e
def test_added_column_mid_stream_is_a_new_version_and_ends_equal(tap_env) -> None:
    env = tap_env
    with env.server.root(env.database) as conn:
        Workload.create(conn)
        env.add_jobs()
        env.tap_until_end()
        tap = env.start_tap()
        try:
            workload = Workload(conn, seed=8)
            workload.run(150)
            env.sql("ALTER TABLE orders ADD COLUMN coupon VARCHAR(20) NULL, "
                    "ADD COLUMN discount DECIMAL(5,2) NULL")
            env.sql("UPDATE orders SET coupon = 'SPRING-ß', discount = 2.50 WHERE id % 3 = 0")
            workload.run(150)  # inserts without the new columns, updates of old rows
            env.sql("INSERT INTO orders (customer, amount, status, updated_at, coupon) "
                    "VALUES ('Zoë', 1.00, 'new', '2024-01-01', 'NEW')")
            env.wait_caught_up()
            env.stop_tap(tap)
        finally:
            env.close()
    registry = env.tmp / "registry" / f"{env.database}.orders"
    assert sorted(p.name for p in registry.glob("*.avsc")) == ["1.avsc", "2.avsc"]
    assert env.assert_equal("orders") > 50
    assert env.assert_equal("order_lines") > 50
    coupons = {r["coupon"] for r in env.oracle("orders").values()}
    assert {"SPRING-ß", "NEW", None} <= coupons


@pytest.mark.e2e
def test_incompatible_change_stops_only_that_table_and_keeps_its_position(tap_env) -> None:
    env = tap_env
    with env.server.root(env.database) as conn:
        Workload.create(conn)
        env.add_jobs()
        env.tap_until_end()
        tap = env.start_tap()
        try:
            workload = Workload(conn, seed=9)
            workload.run(100)
            before_alter = env.master()
            env.sql("ALTER TABLE order_lines DROP COLUMN qty")
            after_alter = env.master()
            env.sql("UPDATE order_lines SET price = price + 1")
            env.sql("UPDATE orders SET qty = 42")
            env.wait_caught_up()
            out = env.stop_tap(tap)
        finally:
            env.close()
    assert tap.returncode == 1
    assert f"STOPPED {env.database}.order_lines" in out
    assert "dropped or renamed column(s) qty" in out
    stopped = env.checkpoint()["stopped"][f"{env.database}.order_lines"]
    # It resumes at or before the first change with the new columns, after the old ones.
    assert before_alter <= (stopped["file"], stopped["pos"]) <= after_alter
    assert env.assert_equal("orders") > 20  # the other table went on
    assert all(r["qty"] == 42 for r in env.oracle("orders").values())


@pytest.mark.reliability
def test_widening_type_changes_flow_as_a_new_schema_version(tap_env) -> None:
    """Issue #50 (what to build 2), binlog side: VARCHAR(n) -> TEXT and INT -> BIGINT keep
    their Avro type (string, long) and flow as they are; a DECIMAL of a larger precision (same
    scale) is a new schema version the old versions' messages read into; none stops."""
    env = tap_env
    env.sql("CREATE TABLE w (id INT PRIMARY KEY, name VARCHAR(10), n INT, "
            "amount DECIMAL(10,2))")
    env.add_jobs()
    env.sql("INSERT INTO w VALUES (1, 'short', 2147483647, 12345678.91)")
    env.tap_until_end()
    env.sql("ALTER TABLE w MODIFY name TEXT, MODIFY n BIGINT, MODIFY amount DECIMAL(14,2)",
            "INSERT INTO w VALUES (2, REPEAT('long é ', 40), 9007199254740993, "
            "123456789012.34)", "UPDATE w SET n = n + 1, amount = amount * 100 WHERE id = 1")
    tap = env.tap_until_end()
    assert not tap.stopped, tap.stopped
    registry = env.tmp / "registry" / f"{env.database}.w"
    assert sorted(p.name for p in registry.glob("*.avsc")) == ["1.avsc", "2.avsc"]
    amount = next(f["type"][1] for f in json.loads((registry / "2.avsc").read_text())["fields"]
                  if f["name"] == "amount")
    assert (amount["precision"], amount["scale"]) == (14, 2)
    assert env.assert_equal("w") == 2  # old and new versions' messages read with the newest
    assert env.oracle("w")["1"]["amount"] == Decimal("1234567891.00")
