"""Crashes and failures of `sluice run`: the real CLI killed (SIGKILL) between two steps, then
run again, ends with the same lake table as an uninterrupted run, no duplicated error rows and
counts that reconcile; a converter that fails stops the run with dbt's message and moves no
checkpoint after it."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from python_ingest.demo import trips as demo
from python_ingest.demo.trips import Event, TripsGenerator
from python_ingest.kafka import broker as broker_mod
from python_ingest.steps.pipeline import JobTables, merge_progress, run_job
from python_ingest.tables.checkpoints import read_checkpoint, step_checkpoint
from python_ingest.tables.formats import table_exists
from tests.conftest import REPO, sluice_cmd, trips_job
from tests.steps.helpers import as_lake, lake_rows


def _generator(seed: int) -> TripsGenerator:
    return TripsGenerator(demo.trips_schema(REPO), seed=seed, first_trip_id=1,
                          invalid_rate=0.03)


def _expected_errors(events: list[Event], batch_id: int) -> Counter[tuple[str, int]]:
    """Fork error rows a batch must produce: one per delivered invalid event (its duplicates
    included: each copy is a raw row of its own)."""
    return Counter((str(e.record["trip_id"]), batch_id) for e in events
                   if e.record is not None and _is_invalid(e.record))


def _is_invalid(record: dict[str, Any]) -> bool:
    return (record.get("fare") is not None and record["fare"] < 0) or \
        record.get("status") == "teleported"


def _error_keys(spark: Any, table: str) -> Counter[tuple[str, int, str, str]]:
    """Error rows per (row key, batch id, step, reason)."""
    if not table_exists(spark, table):
        return Counter()
    return Counter((r[0], int(r[1]), r[2], r[3]) for r in spark.sql(
        f"select _row_key, _batch_id, error_step, error_exception from {table}").collect())


def _checkpoints(spark: Any, tables: JobTables) -> dict[str, int]:
    raw = read_checkpoint(spark, tables.raw)
    staged = spark.sql(f"select max(_batch_id) from {tables.staging}").collect()[0][0] \
        if table_exists(spark, tables.staging) else None
    merged = merge_progress(spark, tables)  # (read once: three tables' timelines)
    return {"raw": raw.batch_id if raw else 0, "staging": int(staged or 0),
            "fork_valid": step_checkpoint(spark, tables.valid, "fork"),
            "fork_errors": step_checkpoint(spark, tables.errors, "fork"),
            "merge_lake": merged[0], "merge_index": merged[1]}


def _reconcile(spark: Any, tables: JobTables) -> None:
    """Per batch: staging rows = valid rows + fork error rows; no raw row errs twice."""
    per_batch = spark.sql(f"""
        select s._batch_id, s.staged, coalesce(v.valid, 0), coalesce(e.errors, 0)
        from (select _batch_id, count(*) as staged from {tables.staging} group by 1) s
        left join (select _batch_id, count(*) as valid from {tables.valid} group by 1) v
            on s._batch_id = v._batch_id
        left join (select _batch_id, count(*) as errors from {tables.errors}
                   where error_step = 'fork' group by 1) e on s._batch_id = e._batch_id
    """).collect()
    for batch_id, staged, valid, errors in per_batch:
        assert staged == valid + errors, (batch_id, staged, valid, errors)
    twice = spark.sql(f"select _kafka_partition, _kafka_offset, error_step, count(*) "
                      f"from {tables.errors} group by 1, 2, 3 having count(*) > 1").collect()
    assert not twice, twice


@pytest.mark.e2e
# the step tables' path (keep_step_tables) on Hudi: Iceberg's step tables are killed in
# tests/history/test_pipeline.py, both formats' batch path in tests/steps/test_batch_path.py
@pytest.mark.parametrize("table_format", ["hudi"])
def test_kill_between_steps_then_rerun(format_spark: Any, broker: str, make_settings: Any,
                                       project: Any, job_name: str, tmp_path: Path,
                                       table_format: str) -> None:
    """The CLI killed at each fault point of the step tables' path in turn, each run a rerun
    of the killed one before it; new batches arrive between some of them (late re-deliveries
    included), so reruns finish earlier batches together with new ones. One JVM per kill
    keeps this affordable."""
    spark = format_spark
    project(job_name)
    settings = make_settings({job_name: trips_job(job_name, keep_step_tables=True)},
                             table_format=table_format)
    job = settings.job(job_name)
    broker_mod.ensure_topic(broker, job.topic, 2)
    generator = _generator(seed=61)
    from python_ingest.steps.dbt import Dbt

    dbt = Dbt(settings)
    tables = JobTables(job_name, dbt.job_models(job_name))
    # fault, events produced before the run, checkpoints after the kill:
    # raw, staging, fork (valid and errors tables), merge (lake and index tables)
    plan = [("after_ingest", lambda: generator.events(300), (1, 0, 0, 0)),
            ("after_staging", lambda: [*generator.late_events(15), *generator.events(150)],
             (2, 2, 0, 0)),
            ("after_fork", lambda: [], (2, 2, 2, 0)),
            ("after_merge", lambda: [*generator.late_events(15), *generator.events(150)],
             (3, 3, 3, 3))]
    expected_errors: Counter[tuple[str, int]] = Counter()
    errors_seen: Counter[tuple[str, int, str, str]] = Counter()
    for fault, events, (raw, staged, forked, merged) in plan:
        batch = list(events())
        if batch:
            demo.produce(broker, job.topic, iter(batch))
            expected_errors += _expected_errors(batch, raw)
        killed = sluice_cmd(tmp_path / "sluice.yml", "run", job_name,
                            env={"SLUICE_FAULT": fault})
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
        assert f"killing the process at '{fault}'" in killed.stderr
        assert _checkpoints(spark, tables) == {
            "raw": raw, "staging": staged, "fork_valid": forked, "fork_errors": forked,
            "merge_lake": merged, "merge_index": merged}, fault
        errors = _error_keys(spark, tables.errors)
        assert errors >= errors_seen, fault  # nothing lost, and below: nothing doubled
        errors_seen = errors
        if forked:
            _reconcile(spark, tables)

    result = run_job(spark, settings, job, dbt=dbt)  # the rerun after the last kill
    assert result.outcome == "up-to-date", result.counts
    assert _checkpoints(spark, tables) == {
        "raw": 3, "staging": 3, "fork_valid": 3, "fork_errors": 3, "merge_lake": 3,
        "merge_index": 3}
    assert tables.lake is not None
    expected = {trip_id: as_lake(row) for trip_id, row in generator.rows.items()}
    assert lake_rows(spark, tables.lake) == expected
    _reconcile(spark, tables)
    errors = _error_keys(spark, tables.errors)
    assert errors == errors_seen
    assert Counter((k[0], k[1]) for k in errors.elements() if k[2] == "fork") == \
        expected_errors
    assert not [k for k in errors if k[2] == "merge"]


@pytest.mark.e2e
@pytest.mark.reliability
def test_failing_converter_fails_the_run_with_dbts_message_and_moves_nothing_after_it(
        spark: Any, broker: str, make_settings: Any, project: Any, job_name: str,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from python_ingest.cli import main as cli
    from python_ingest.steps.dbt import Dbt
    from python_ingest.tables.runs import last_runs

    root = project(job_name)
    broken = f"a_{job_name}"  # runs first in `run --all`, and fails: no converter reads it
    settings = make_settings({job_name: trips_job(job_name), broken: trips_job(broken)})
    job = settings.job(job_name)
    broker_mod.ensure_topic(broker, job.topic, 1)
    generator = _generator(seed=71)
    demo.produce(broker, job.topic, generator.events(120))
    # one broken job never stops the others (#9.11): recorded, said, exit 1
    code = cli.main(["--config", str(tmp_path / "sluice.yml"), "run", "--all"])
    captured = capsys.readouterr()
    assert code == 1, captured.err
    assert f"{broken}: failed, run" in captured.out and f"no dbt model reads raw.{broken}" \
        in captured.out
    assert f"{job_name}: succeeded" in captured.out
    assert f"1 of 2 jobs failed: {broken}" in captured.err
    assert last_runs(spark, broken, 1)[0]["outcome"] == "failed"
    tables = JobTables(job_name, Dbt(settings).job_models(job_name))
    assert tables.lake is not None
    checkpoints = _checkpoints(spark, tables)  # the batch path: no step tables
    assert checkpoints == {"raw": 1, "staging": 0, "fork_valid": 0, "fork_errors": 1,
                           "merge_lake": 1, "merge_index": 1}
    lake = lake_rows(spark, tables.lake)
    errors = _error_keys(spark, tables.errors)

    model = root / "models" / "staging" / "test" / f"stg_test__{job_name}.sql"
    text = model.read_text()
    assert "select * from converted" in text  # the demo's converter, as the test copied it
    model.write_text(text.replace("select * from converted",
                                  "select *, initcap(trim(no_such_column)) from converted"))
    demo.produce(broker, job.topic, generator.events(60))
    # the real CLI, in this process (its session is the test's: no second JVM)
    code = cli.main(["--config", str(tmp_path / "sluice.yml"), "run", job_name])
    stderr = capsys.readouterr().err
    assert code == 2, stderr
    # (the batch path compiled the converter: Spark refuses its SQL)
    assert f"sluice: error: converter stg_test__{job_name} (compiled by dbt) failed" in stderr
    assert "no_such_column" in stderr and "UNRESOLVED_COLUMN" in stderr  # Spark's, via dbt

    # ingestion committed batch 2; nothing after the converter moved
    assert _checkpoints(spark, tables) == {**checkpoints, "raw": 2}
    assert lake_rows(spark, tables.lake) == lake
    assert _error_keys(spark, tables.errors) == errors
    assert not table_exists(spark, tables.valid)
    run = last_runs(spark, job_name, 1)[0]
    assert run["outcome"] == "failed" and "no_such_column" in run["error"]
