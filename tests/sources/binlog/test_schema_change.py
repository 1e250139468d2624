"""Schema changes: an added column becomes a new schema version; an incompatible change stops
that table (with a clear error and its resume position) while the other tables go on."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from tests.sources.binlog.workload import workload_tapped


@pytest.mark.e2e
def test_added_column_mid_stream_is_a_new_version_and_ends_equal(tap_env) -> None:
    env = tap_env
    with workload_tapped(env, seed=8) as (workload, tap):
        workload.run(150)
        env.sql("ALTER TABLE orders ADD COLUMN coupon VARCHAR(20) NULL, "
                "ADD COLUMN discount DECIMAL(5,2) NULL")
        env.sql("UPDATE orders SET coupon = 'SPRING-ß', discount = 2.50 WHERE id % 3 = 0")
        workload.run(150)  # inserts without the new columns, updates of old rows
        env.sql("INSERT INTO orders (customer, amount, status, updated_at, coupon) "
                "VALUES ('Zoë', 1.00, 'new', '2024-01-01', 'NEW')")
        env.wait_caught_up()
        env.stop_tap(tap)
    registry = env.tmp / "registry" / f"{env.database}.orders"
    assert sorted(p.name for p in registry.glob("*.avsc")) == ["1.avsc", "2.avsc"]
    assert env.assert_equal("orders") > 50
    assert env.assert_equal("order_lines") > 50
    coupons = {r["coupon"] for r in env.oracle("orders").values()}
    assert {"SPRING-ß", "NEW", None} <= coupons


@pytest.mark.e2e
def test_incompatible_change_stops_only_that_table_and_keeps_its_position(tap_env) -> None:
    env = tap_env
    with workload_tapped(env, seed=9) as (workload, tap):
        workload.run(100)
        before_alter = env.master()
        env.sql("ALTER TABLE order_lines DROP COLUMN qty")
        after_alter = env.master()
        env.sql("UPDATE order_lines SET price = price + 1")
        env.sql("UPDATE orders SET qty = 42")
        env.wait_caught_up()
        out = env.stop_tap(tap)
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


@pytest.mark.e2e
@pytest.mark.reliability
def test_widened_columns_reach_the_lake_with_their_wide_values(tap_env, format_spark,
                                                               table_format) -> None:
    """Issue #50 (what to build 2), the lake side: after DECIMAL(8,2) -> DECIMAL(12,2),
    INT -> BIGINT and VARCHAR(10) -> TEXT, rows that need the new width land whole in every
    table of the job (raw, the lake; Hudi through the batch path, Iceberg through dbt's
    staging, valid and lake_merge), equal to MariaDB row for row; nothing stops."""
    from tests.sources.binlog.lake import (
        assert_lake_equals_source,
        job_of,
        make_project,
        run_pipeline,
        scaffold,
    )

    env, spark = tap_env, format_spark
    env.table_format = table_format
    make_project(env.tmp)
    env.sql("CREATE TABLE wide (id INT PRIMARY KEY, n INT, amount DECIMAL(8,2), "
            "name VARCHAR(10))")
    scaffold(env)
    env.tap_until_end()  # the tap's start: the rows below are in its stream
    env.sql("INSERT INTO wide VALUES (1, 7, 123456.12, 'a'), (2, 2147483647, -999999.99, 'b')")
    env.tap_until_end()
    assert all(r.outcome == "succeeded" for r in run_pipeline(spark, env))
    env.sql("ALTER TABLE wide MODIFY n BIGINT, MODIFY amount DECIMAL(12,2), MODIFY name TEXT",
            "INSERT INTO wide VALUES (3, 9007199254740993, 12345678.12, REPEAT('é', 300))",
            "UPDATE wide SET amount = -9999999999.99, n = n * 1000000 WHERE id IN (1, 2)")
    env.tap_until_end()
    runs = run_pipeline(spark, env)
    assert all(r.outcome == "succeeded" for r in runs), [r.details.get("error") for r in runs]
    assert assert_lake_equals_source(spark, env, "wide") == 3
    job = job_of(env, "wide")
    for table in (f"raw.{job}", f"lake.{job}"):
        assert spark.table(table).schema["amount"].dataType.simpleString() == \
            "decimal(12,2)", table
    assert {r["amount"] for r in spark.table(f"lake.{job}").collect()} == \
        {Decimal("-9999999999.99"), Decimal("12345678.12")}
