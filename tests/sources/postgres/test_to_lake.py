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
