"""The batch path (steps/batch.py): converter and fork in one pass, no step tables, no dbt
invocation per batch. It must build the lake the step tables' path builds (what a plain `dbt
run` does) from the same events, row for row, and stay exact under kill -9."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from python_ingest.demo import trips as demo
from python_ingest.kafka import broker as broker_mod
from python_ingest.steps.dbt import Dbt
from python_ingest.steps.merge import index_cache
from python_ingest.steps.pipeline import merge_progress, run_job
from python_ingest.tables.checkpoints import read_checkpoint, step_checkpoint
from python_ingest.tables.formats import table_exists
from python_ingest.tables.names import JobTables
from python_ingest.tables.runs import flush_records
from tests.conftest import REPO, sluice_cmd, trips_job
from tests.steps.helpers import as_lake, assert_index_agrees, lake_rows

HIDDEN = ("_merged_at", "_indexed_at", "_errored_at")


def _generator(seed: int) -> demo.TripsGenerator:
    return demo.TripsGenerator(demo.trips_schema(REPO), seed=seed, first_trip_id=1,
                               invalid_rate=0.05)


def _rows(spark: Any, table: str, key: tuple[str, ...]) -> list[tuple[Any, ...]]:
    """Every row of ``table`` without Hudi's and the commit times' columns, sorted."""
    frame = spark.table(table)
    columns = sorted(c for c in frame.columns if not c.startswith("_hoodie") and c not in HIDDEN)
    rows = [tuple(r) for r in frame.select(*columns).collect()]
    return [tuple(columns), *sorted(rows, key=lambda r: tuple(str(v) for v in r))]


def _errors(spark: Any, table: str) -> Counter[tuple[Any, ...]]:
    """Error rows, their source data without the time each job ingested it."""
    import json

    rows = spark.sql(f"select _row_key, _ref_key, _batch_id, error_step, error_exception, "
                     f"error_source_data from {table}").collect()
    return Counter((*r[:5], json.dumps({k: v for k, v in json.loads(r[5]).items()
                                        if k != "_ingested_at"}, sort_keys=True))
                   for r in rows)


@pytest.mark.e2e
def test_the_batch_path_builds_the_lake_the_step_tables_build(
        spark: Any, broker: str, make_settings: Any, project: Any, job_name: str) -> None:
    """Two jobs on one topic, one with its step tables (the path a plain `dbt run` takes), one
    on the batch path: after batches of creates, updates, partial updates, deletes,
    duplicates, late events and rows failing the suite, their lakes, global indexes and error
    rows are equal, and both equal the source."""
    steps, batch = f"{job_name}_steps", f"{job_name}_batch"
    project(steps)
    root = project(batch)
    settings = make_settings({steps: trips_job(job_name, keep_step_tables=True),
                              batch: trips_job(job_name)})
    broker_mod.ensure_topic(broker, job_name, 2)
    dbt = Dbt(settings, project=root)
    generator = _generator(seed=29)
    paths: dict[str, list[str]] = {steps: [], batch: []}
    for events in (lambda: generator.events(200),
                   lambda: [*generator.late_events(20), *generator.events(150)],
                   lambda: generator.changes(120),
                   lambda: [*generator.late_events(10), *generator.events(60)]):
        demo.produce(broker, job_name, iter(list(events())))
        for name in (steps, batch):
            result = run_job(spark, settings, settings.job(name), dbt=dbt)
            assert result.outcome == "succeeded", result.error
            assert result.report is None  # `reports: false` (tests/conftest.py): no page
            paths[name].append(dbt_path(spark, result.run_id))
    assert paths[steps] == ["step tables"] * 4
    assert paths[batch] == ["batch"] * 4  # the first creates the lake too

    a, b = JobTables(steps, dbt.job_models(steps)), JobTables(batch, dbt.job_models(batch))
    assert a.lake and b.lake
    # created alike: the materialization's table and the batch path's (steps/batch.py)
    assert _created(spark, a.lake) == _created(spark, b.lake)
    assert spark.table(a.lake).schema == spark.table(b.lake).schema
    assert _rows(spark, a.lake, ("trip_id",)) == _rows(spark, b.lake, ("trip_id",))
    assert lake_rows(spark, b.lake) == {t: as_lake(r) for t, r in generator.rows.items()}
    # the batch path's small batches carry their index entries in their lake commits; the
    # index table takes them every few batches, and before anything reads it
    assert step_checkpoint(spark, b.index, "merge") < 4
    index_cache.complete(spark, b)
    assert step_checkpoint(spark, b.index, "merge") == 4
    assert _rows(spark, a.index, ("_row_key",)) == _rows(spark, b.index, ("_row_key",))
    assert_index_agrees(spark, b)
    errors = _errors(spark, b.errors)
    assert errors == _errors(spark, a.errors)
    assert any(e[3] == "fork" for e in errors)  # rows failed the suite
    assert step_checkpoint(spark, b.lake, "merge") == 4
    # the batch path wrote no step table
    assert not table_exists(spark, b.staging) and not table_exists(spark, b.valid)


def _created(spark: Any, lake: str) -> tuple[dict[str, str], dict[str, str]]:
    """A lake's table properties (not Hudi's own bookkeeping) and its kept write settings."""
    from python_ingest.runtime.catalog import kept_write_settings, location

    found = {r[0]: r[1] for r in spark.sql(f"show tblproperties {lake}").collect()
             if not r[0].startswith(("transient_", "last_commit", "hoodie.table.create",
                                     "hoodie.table.name", "spark.sql.", "path", "option.path"))}
    return found, kept_write_settings(spark, location(spark, lake))


def dbt_path(spark: Any, run_id: str) -> str:
    import json

    flush_records()  # the records this process holds (tests/conftest.py)
    details = spark.sql(f"select details from meta.runs where run_id = '{run_id}'"
                        ).collect()[0][0]
    return str(json.loads(details).get("path"))


@pytest.mark.e2e
@pytest.mark.reliability
@pytest.mark.parametrize("table_format", ["hudi", "iceberg"])
def test_the_batch_path_killed_between_its_commits_then_rerun(
        format_spark: Any, broker: str, make_settings: Any, project: Any, job_name: str,
        tmp_path: Path, table_format: str) -> None:
    """kill -9 after the fork's error commit of the first batch (the run created the lake and
    merged nothing), between the index's commit and the lake's (the lake model's SQL writes
    the index first; the driver's fold defers its entries to the lake commit) and after the
    lake commit (the index entries then only in the lake's commit), new events arriving in
    between: each rerun finishes the batch and the index takes the entries once, nothing lost
    or doubled. Hudi's upsert and Iceberg's MERGE."""
    spark = format_spark
    project(job_name)
    settings = make_settings({job_name: trips_job(job_name)}, table_format=table_format)
    job = settings.job(job_name)
    broker_mod.ensure_topic(broker, job.topic, 2)
    dbt = Dbt(settings)
    tables = JobTables(job_name, dbt.job_models(job_name))
    generator = _generator(seed=37)
    demo.produce(broker, job.topic, generator.events(200))
    for fault, events in (("after_fork",  # the first batch: its run creates the lake
                           lambda: [*generator.late_events(15), *generator.events(150)]),
                          ("merge_after_index", lambda: list(generator.changes(100))),
                          ("after_lake_commit", lambda: list(generator.changes(80)))):
        demo.produce(broker, job.topic, iter(events()))
        before = merge_progress(spark, tables)[0]
        sql = {"SLUICE_DRIVER_ROWS": "0"} if fault == "merge_after_index" else {}
        killed = sluice_cmd(tmp_path / "sluice.yml", "run", job_name,
                            env={"SLUICE_FAULT": fault, **sql})
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
        assert f"killing the process at '{fault}'" in killed.stderr
        if fault == "after_lake_commit":  # the lake has it, the index table does not
            assert merge_progress(spark, tables)[0] == before + 1
            assert step_checkpoint(spark, tables.index, "merge") < before + 1
        elif fault == "merge_after_index":  # the index table has it, the lake does not
            assert step_checkpoint(spark, tables.index, "merge") == before + 1
            assert merge_progress(spark, tables)[0] == before
            # the rerun skips the index's commit and merges every batch landed (so the next
            # kill's batch is a fresh one)
            rerun = run_job(spark, settings, job, dbt=dbt)
            assert rerun.outcome == "succeeded", rerun.error
            landed = read_checkpoint(spark, tables.raw)
            assert landed is not None and merge_progress(spark, tables)[0] == landed.batch_id
        else:
            assert tables.lake is not None and table_exists(spark, tables.lake)
            assert merge_progress(spark, tables)[0] == before == 0  # created, not merged
    result = run_job(spark, settings, job, dbt=dbt)  # (the lake had the last killed batch)
    assert result.outcome == "up-to-date", result.error
    assert tables.lake is not None
    assert merge_progress(spark, tables)[0] == 3
    assert lake_rows(spark, tables.lake) == {t: as_lake(r) for t, r in generator.rows.items()}
    index_cache.complete(spark, tables)
    assert_index_agrees(spark, tables)
    twice = spark.sql(f"select _row_key, _batch_id from {tables.index} group by 1, 2 "
                      "having count(*) > 1").collect()
    assert not twice  # the index entries of the killed batch were written once
    doubled = spark.sql(f"select _batch_id, _kafka_partition, _kafka_offset, error_step "
                        f"from {tables.errors} group by 1, 2, 3, 4 having count(*) > 1"
                        ).collect()
    assert not doubled
    invalid = sum(1 for _ in spark.sql(f"select 1 from {tables.errors} "
                                       "where error_step = 'fork'").collect())
    assert invalid > 0 and table_exists(spark, tables.errors)

    # a batch that changes nothing (only late re-deliveries): its empty commit carries the
    # merge checkpoint past it, so the next run neither forks nor counts it again
    demo.produce(broker, job.topic, iter(list(generator.late_events(30))))
    stale = run_job(spark, settings, job, dbt=dbt)
    assert stale.outcome == "succeeded", stale.error
    assert [stale.counts[k] for k in ("inserted", "updated", "deleted")] == [0, 0, 0]
    assert merge_progress(spark, tables)[0] == 4
    again = run_job(spark, settings, job, dbt=dbt)
    assert again.outcome == "up-to-date", again.counts
    assert lake_rows(spark, tables.lake) == {t: as_lake(r) for t, r in generator.rows.items()}
