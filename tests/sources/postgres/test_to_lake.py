"""The whole way: PostgreSQL → snapshot and tap (killed at random moments) → Kafka → raw →
staging → fork → lake (a run killed mid-batch, then run again), with the models the scaffold
writes, proven equal to the PostgreSQL tables at the end (the binlog path's check,
tests/sources/binlog/test_to_lake.py), by the test and by `sluice verify`."""

from __future__ import annotations

import random
import signal
import threading
import time

import pytest

from python_ingest.verify.run import verify
from tests.conftest import sluice_cmd
from tests.sources.binlog.lake import _normal, lake_rows, make_project, scaffold
from tests.sources.postgres.test_snapshot import _prefill
from tests.sources.postgres.workload import PgWorkload

pytestmark = [pytest.mark.postgres_source, pytest.mark.e2e]


def _value(value, is_json: bool = False):
    if isinstance(value, float) and value != value:
        return "NaN"
    return _normal(value, is_json)


def run_jobs(spark, env, jobs: list[str]) -> list:
    """One run of ``jobs`` in this process (python_ingest.steps.pipeline.run_all)."""
    from python_ingest.steps.pipeline import run_all

    return run_all(spark, env.settings(), jobs)


def assert_lake_equals_postgres(spark, env, table: str, json_columns=()) -> int:
    """The lake table equals the PostgreSQL table, row for row and value for value."""
    expected = env.source_rows(table)
    actual = lake_rows(spark, env, table)
    missing = sorted(set(expected) - set(actual))[:5]
    extra = sorted(set(actual) - set(expected))[:5]
    assert not missing and not extra, (
        f"{table}: {len(expected)} rows in PostgreSQL, {len(actual)} in the lake; missing "
        f"{missing}, extra {extra}")
    differ = []
    for key, row in expected.items():
        want = {c: _value(v, c in json_columns) for c, v in row.items()}
        got = {c: _value(actual[key].get(c, "<no column>"), c in json_columns) for c in row}
        if got != want:
            differ.append((key, {c: (got[c], want[c]) for c in row if got[c] != want[c]}))
    assert not differ, f"{table}: {len(differ)} rows differ (lake, PostgreSQL): {differ[:3]}"
    return len(expected)


def test_snapshot_and_killed_tap_through_the_pipeline_end_equal(pg_env, spark) -> None:
    env = pg_env
    rng = random.Random(91)
    make_project(env.tmp)
    _prefill(env, 300)
    result = scaffold(env)  # the models, suites and jobs, as `sluice tap --scaffold` writes
    assert {"public_orders", "public_notes"} <= set(result.jobs)
    env.bootstrap_all()
    workload = PgWorkload(env.connect, seed=92, first_id=50_000)
    writer = threading.Thread(target=workload.run, args=(200, 0.01))
    writer.start()
    kills = 0
    try:
        while writer.is_alive():  # the tap: SIGKILLed at random moments, restarted
            tap = env.start_tap(wait=rng.random() < 0.7)
            time.sleep(rng.uniform(0.3, 1.5))
            tap.send_signal(signal.SIGKILL)
            tap.wait()
            kills += 1
        writer.join()
        tap = env.start_tap()
        env.wait_caught_up()
        env.stop_tap(tap)
    finally:
        writer.join()
        workload.close()
        env.close()
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
    assert assert_lake_equals_postgres(spark, env, "notes", json_columns=("attrs",)) > 200
    job = env.settings().job("public_notes")
    checked = verify(spark, env.settings(), job, "lake.public_notes", settle_s=10, quiet_s=2)
    assert checked.equal and checked.source_rows > 200, checked.differences
