"""Run records: written at once by a one-shot run; held back and written together, in one
commit, by a long-running runner (``records_deferred``); a metered run's cost."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from python_ingest.runtime.cost import metered
from python_ingest.tables.names import RUNS_TABLE
from python_ingest.tables.runs import Run, last_runs, records_deferred, records_held


def _recorded(spark: Any, job: str) -> set[str]:
    return {r[0] for r in spark.sql(f"select run_id from {RUNS_TABLE} where job = '{job}'"
                                    ).collect()}


@pytest.mark.e2e
def test_deferred_run_records_land_together_when_the_block_ends(spark: Any,
                                                                job_name: str) -> None:
    Run(job=job_name).finish(spark, "succeeded")  # at once
    assert len(_recorded(spark, job_name)) == 1
    with records_deferred(spark, every_s=3600):
        runs = [Run(job=job_name) for _ in range(3)]
        for run in runs:
            run.finish(spark, "succeeded")
        assert len(_recorded(spark, job_name)) == 1  # held back
    ids = {run.run_id for run in runs}
    assert _recorded(spark, job_name) >= ids
    if "_hoodie_commit_time" in spark.table(RUNS_TABLE).columns:  # Hudi: in one commit
        wanted = ", ".join(f"'{i}'" for i in ids)
        assert spark.sql(f"select count(distinct _hoodie_commit_time) from {RUNS_TABLE} "
                         f"where run_id in ({wanted})").collect()[0][0] == 1
    Run(job=job_name).finish(spark, "failed", "boom")  # at once again after the block
    assert len(_recorded(spark, job_name)) == 5


@pytest.mark.e2e
def test_held_run_records_are_written_in_one_commit_before_a_reader_reads(
        spark: Any, job_name: str) -> None:
    """``records_held`` (a script running jobs in turn, the test suite): nothing is written
    until a reader asks (last_runs writes the held records first, all in one commit); what is
    left when the block ends is written then; a runner's deferral inside it keeps its own."""
    with records_held():
        first = [Run(job=job_name) for _ in range(2)]
        for run in first:
            run.finish(spark, "succeeded")
        assert not _recorded(spark, job_name)  # held
        assert {r["run_id"] for r in last_runs(spark, job_name)} == {r.run_id for r in first}
        wanted = ", ".join(f"'{r.run_id}'" for r in first)
        if "_hoodie_commit_time" in spark.table(RUNS_TABLE).columns:  # Hudi: one commit
            assert spark.sql(f"select count(distinct _hoodie_commit_time) from {RUNS_TABLE} "
                             f"where run_id in ({wanted})").collect()[0][0] == 1
        with records_deferred(spark, every_s=3600):
            Run(job=job_name).finish(spark, "succeeded")
        assert len(_recorded(spark, job_name)) == 3  # the runner's, at its end
        Run(job=job_name).finish(spark, "failed", "boom")
        assert len(_recorded(spark, job_name)) == 3
    assert len(_recorded(spark, job_name)) == 4  # at the block's end


@pytest.mark.e2e
def test_deferred_run_records_a_failed_write_held_are_written_by_the_next_flush(
        spark: Any, job_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """meta.runs unwritable during a flush (its Hudi table settings unreadable, as a store
    failing its reads): the records are not dropped but held, and the next flush writes
    them. Before, a failed flush lost them (two runners stopping at once on S3 did)."""
    from pathlib import Path

    from python_ingest.runtime.catalog import location
    from python_ingest.tables import runs as runs_mod

    # one attempt: each reads the damaged settings through Hudi's own retries (about 5 s)
    monkeypatch.setattr(runs_mod, "WRITE_ATTEMPTS", 1)

    Run(job=job_name).finish(spark, "succeeded")  # meta.runs exists
    folder = Path(location(spark, RUNS_TABLE).removeprefix("file:"))
    properties = folder / ".hoodie" / "hoodie.properties"
    assert properties.is_file(), properties
    kept = properties.read_bytes()
    with records_deferred(spark, every_s=3600):
        held = Run(job=job_name)
        held.finish(spark, "succeeded")
        deferred = runs_mod._deferred
        assert deferred is not None
        properties.write_text("hoodie.table.version=not a version\n")
        try:
            deferred.flush(spark)  # fails after its attempts
            assert [r[0] for r in deferred.rows] == [held.run_id]  # held, not dropped
        finally:
            properties.write_bytes(kept)
        assert held.run_id not in _recorded(spark, job_name)
    assert held.run_id in _recorded(spark, job_name)  # the block's last flush wrote it


@pytest.mark.e2e
def test_a_metered_run_records_its_spark_tasks_time_not_wall_time_times_cores(
        spark: Any, job_name: str) -> None:
    """#34.6: the record of a run metered by its job group has its tasks' executor seconds
    (in ``core_seconds``, which older readers show, and ``details.cost`` with the CPU time);
    one that was not keeps wall time × cores and no ``details.cost``."""
    run = Run(job=job_name)
    with metered(spark, run.run_id) as meter:
        spark.range(2, numPartitions=2).selectExpr(
            "reflect('java.lang.Thread', 'sleep', cast(300 + id * 0 as bigint))").collect()
        time.sleep(1.0)  # the driver idle: wall time × cores would charge both cores for it
    run.cost = meter.cost()
    assert run.cost is not None and 0.6 <= run.cost.executor_s < 1.2, run.cost
    run.finish(spark, "succeeded")
    unmetered = Run(job=job_name)
    unmetered.finish(spark, "succeeded")

    rows = {r["run_id"]: r for r in spark.sql(
        f"select run_id, duration_s, core_seconds, details from {RUNS_TABLE} "
        f"where job = '{job_name}'").collect()}
    metered_row, plain_row = rows[run.run_id], rows[unmetered.run_id]
    assert metered_row["core_seconds"] == run.cost.executor_s
    assert metered_row["core_seconds"] < metered_row["duration_s"]  # < wall time × 2 cores
    cost = json.loads(metered_row["details"])["cost"]
    assert cost == {**run.cost.as_dict(), "jobs": 1, "stages": 1}
    assert 0 <= cost["cpu_s"] <= cost["executor_s"]
    cores = spark.sparkContext.defaultParallelism
    assert plain_row["core_seconds"] == pytest.approx(plain_row["duration_s"] * cores)
    assert "cost" not in json.loads(plain_row["details"])


def test_holders_ended_out_of_order_never_swallow_a_record() -> None:
    """Blocks of threads that outlive each other (a runner started in one test, stopped in
    the next) end out of order: the holder left current has ended, and a record handed to it
    is refused (``Run.finish`` then writes it at once) instead of held where no flush comes."""
    from python_ingest.tables import runs as runs_mod

    first, second = records_held(), records_held()
    first.__enter__()
    held_first = runs_mod._deferred
    second.__enter__()
    held_second = runs_mod._deferred
    assert held_first is not None and held_second is not None
    assert held_second.add(("a",)) and held_second.rows == [("a",)]
    held_second.rows.clear()
    first.__exit__(None, None, None)  # the outer one ends first: the inner stays current
    assert runs_mod._deferred is held_second
    second.__exit__(None, None, None)
    left = runs_mod._deferred
    assert left is None or not left.add(("b",))  # ended: refused, not swallowed
    assert not held_first.rows and not held_second.rows
    runs_mod._deferred = None
