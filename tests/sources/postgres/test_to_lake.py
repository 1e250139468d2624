"""The whole way: PostgreSQL → snapshot and tap (killed at random moments) → Kafka → raw →
staging → fork → lake (a run killed mid-batch, then run again), with the models the scaffold
writes, proven equal to the PostgreSQL tables at the end (the binlog path's check,
tests/sources/binlog/test_to_lake.py), by the test and by `sluice verify`."""

from __future__ import annotations

import random
import signal

import pytest

from python_ingest.verify.run import verify
from tests.conftest import sluice_cmd
from tests.sources.binlog.lake import assert_lake_equals_source, make_project, scaffold
from tests.sources.postgres.test_snapshot import _prefill
from tests.sources.postgres.workload import PgWorkload

pytestmark = [pytest.mark.postgres_source, pytest.mark.e2e]


def run_jobs(spark, env, jobs: list[str]) -> list:
    """One run of ``jobs`` in this process (python_ingest.steps.pipeline.run_all)."""
    from python_ingest.steps.pipeline import run_all

    return run_all(spark, env.settings(), jobs)


def test_snapshot_and_killed_tap_through_the_pipeline_end_equal(pg_env, spark) -> None:
    env = pg_env
    rng = random.Random(91)
    make_project(env.tmp)
    _prefill(env, 300)
    result = scaffold(env)  # the models, suites and jobs, as `sluice tap --scaffold` writes
    assert {"public_orders", "public_notes"} <= set(result.jobs)
    env.bootstrap_all()
    workload = PgWorkload(env.connect, seed=92, first_id=50_000)
    try:
        kills = env.kill_taps_during(lambda: workload.run(200, 0.01), rng, (0.3, 1.5))
    finally:
        workload.close()
    # the notes table's job (every kind of value; orders is compared through its topic,
    # which keeps the test within the suite's time): `sluice run` in its own process, killed
    # mid-batch (the raw and index tables committed, the lake not), then run again here
    killed = sluice_cmd(env.config, "run", "public_notes",
                        env={"SLUICE_FAULT": "merge_after_index"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert "killing the process at 'merge_after_index'" in killed.stderr
    runs = run_jobs(spark, env, ["public_notes"])
    assert kills >= 2 and runs[0].outcome == "succeeded", (kills, runs[0].counts)
    assert sum(r.counts["inserted"] for r in runs) > 200  # the killed batch, merged now
    assert all(r.counts.get("merge_errors", 0) == 0 for r in runs)
    assert env.assert_equal("orders") > 200  # its topic, as the merge applies it
    assert assert_lake_equals_source(spark, env, "notes", json_columns=("attrs",)) > 200
    job = env.settings().job("public_notes")
    checked = verify(spark, env.settings(), job, "lake.public_notes", settle_s=10, quiet_s=2)
    assert checked.equal and checked.source_rows > 200, checked.differences


@pytest.mark.reliability
def test_widened_columns_reach_the_lake_with_their_wide_values(pg_env, spark) -> None:
    """Issue #50 (what to build 2), the lake side on PostgreSQL: numeric(8,2) ->
    numeric(12,2) and varchar(10) -> text, then rows that need the new width: every table of
    the job takes the wider decimal, the lake equals the table row for row (Hudi)."""
    from decimal import Decimal

    env = pg_env
    make_project(env.tmp)
    env.sql("CREATE TABLE wide (id int PRIMARY KEY, amount numeric(8,2), name varchar(10))")
    scaffold(env)
    env.tap_until_end()
    env.sql("INSERT INTO wide VALUES (1, 123456.12, 'a'), (2, -999999.99, 'b')")
    env.tap_until_end()
    job = "public_wide"
    assert run_jobs(spark, env, [job])[0].outcome == "succeeded"
    env.sql("ALTER TABLE wide ALTER COLUMN amount TYPE numeric(12,2), "
            "ALTER COLUMN name TYPE text",
            "INSERT INTO wide VALUES (3, 12345678.12, repeat('é', 300))",
            "UPDATE wide SET amount = -9999999999.99 WHERE id = 1")
    env.tap_until_end()
    runs = run_jobs(spark, env, [job])
    assert runs[0].outcome == "succeeded", runs[0].details.get("error")
    assert assert_lake_equals_source(spark, env, "wide") == 3
    for table in (f"raw.{job}", f"lake.{job}"):
        assert spark.table(table).schema["amount"].dataType.simpleString() == \
            "decimal(12,2)", table
    assert {r["amount"] for r in spark.table(f"lake.{job}").collect()} == \
        {Decimal("-9999999999.99"), Decimal("-999999.99"), Decimal("12345678.12")}
