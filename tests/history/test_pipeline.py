"""History tables written by the pipeline, on both formats (the batch path; Iceberg with
keep_step_tables under the kill: the step tables' path): the demo's events (creates,
updates, partial updates, deletes, duplicates, late events) through a lake model with
``history=true``; after
every batch the current versions equal the lake row for row, every key's versions tile time,
and a kill -9 of a `sluice run` between the history's commit and the lake's neither doubles
nor loses a version."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from python_ingest.demo import trips as demo
from python_ingest.kafka import broker as broker_mod
from python_ingest.steps.history.rules import HISTORY_STEP
from python_ingest.steps.merge.index import MERGE_STEP
from python_ingest.steps.pipeline import run_job
from python_ingest.tables.checkpoints import step_checkpoint
from tests.conftest import REPO, sluice_cmd, trips_job

pytestmark = [pytest.mark.history, pytest.mark.e2e]


def _payload(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if not k.startswith("_")}


def _check(spark: Any, lake: str, history: str) -> list[dict[str, Any]]:
    live = {r["_row_key"]: _payload(r.asDict()) for r in spark.sql(
        f"select * from {lake} where not coalesce(_is_deleted, false)").collect()}
    versions = [r.asDict() for r in spark.sql(f"select * from {history}").collect()]
    records = [(v["_row_key"], v["_ref_key"]) for v in versions]
    assert len(records) == len(set(records))  # no version twice
    current = {v["_row_key"]: _payload(v) for v in versions
               if v["_is_current"] and not v["_is_deleted"]}
    assert current == live
    by_key: dict[str, list[dict[str, Any]]] = {}
    for version in versions:
        by_key.setdefault(version["_row_key"], []).append(version)
    for keyed in by_key.values():
        keyed.sort(key=lambda v: v["_ref_key"])
        for before, after in zip(keyed, keyed[1:], strict=False):
            assert before["_closed_ref_key"] == after["_ref_key"]  # new_record: no gaps
            assert before["_valid_to"] == after["_valid_from"] >= before["_valid_from"]
        assert keyed[-1]["_is_current"] and keyed[-1]["_valid_to"] is None
    return versions


def _add_column(root: Path, job: str) -> None:
    """The job's converter derives a new column, city_code, and its lake model keeps it."""
    converter = root / "models" / "staging" / "test" / f"stg_test__{job}.sql"
    text = converter.read_text()
    assert text.rstrip().endswith("select * from converted")
    converter.write_text(text.rstrip()[:-len("select * from converted")]
                         + "select *, upper(city_name) as city_code from converted\n")
    model = root / "models" / "lake" / f"{job}.sql"
    text = model.read_text()
    assert "'requested_on']" in text
    model.write_text(text.replace("'requested_on']", "'requested_on', 'city_code']"))


@pytest.mark.reliability
def test_the_history_is_written_with_the_lake_and_exactly_once_under_a_kill(
        format_spark: Any, table_format: str, broker: str, make_settings: Any, project: Any,
        job_name: str, tmp_path: Path) -> None:
    """The second batch's `sluice run` (its own process) is killed -9 between the history's
    commit and the lake's (Hudi, the batch path: after the history's) or between the lake's
    and the history's (Iceberg with keep_step_tables, the step tables' path: before the
    history's); the rerun
    (in this process) finishes the batch: each change is one version, the current versions
    are the lake's rows. That batch's converter and lake model add a column: its versions
    hold it, though on the batch path the history is written before the lake gains it, and
    though the killed process altered a table this process had named before."""
    spark = format_spark
    root = project(job_name)
    model = root / "models" / "lake" / f"{job_name}.sql"
    model.write_text(model.read_text().replace(
        "config(keep_tombstones=false)",
        "config(keep_tombstones=false, history=true, hard_deletes='new_record')"))
    # Iceberg here keeps its step tables: both paths' kill points are checked
    settings = make_settings({job_name: trips_job(
        job_name, keep_step_tables=table_format == "iceberg")}, table_format=table_format)
    broker_mod.ensure_topic(broker, job_name, 2)
    generator = demo.TripsGenerator(demo.trips_schema(REPO), seed=52, first_trip_id=1)
    lake, history = f"lake.{job_name}", f"lake.{job_name}__history"
    runs = (lambda: generator.events(80),
            lambda: [*generator.late_events(15), *generator.events(50)])
    for number, events in enumerate(runs, 1):
        demo.produce(broker, job_name, iter(list(events())))
        if number == 2:  # the converter and the lake model add a column mid-stream
            _add_column(root, job_name)
        if number == 2:  # killed between the history's commit and the lake's (batch path),
            # or between the lake's and the history's (step tables' path)
            point = "after_history_commit" if table_format == "hudi" else "before_history"
            killed = sluice_cmd(tmp_path / "sluice.yml", "run", job_name,
                                env={"SLUICE_FAULT": point})
            assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
            assert f"killing the process at '{point}'" in killed.stderr
            done = (step_checkpoint(spark, lake, MERGE_STEP),
                    step_checkpoint(spark, history, HISTORY_STEP))
            assert done == ((1, 2) if point == "after_history_commit" else (2, 1))
        result = run_job(spark, settings, settings.job(job_name))
        assert result.outcome in ("succeeded", "up-to-date"), result.error
        versions = _check(spark, lake, history)
        assert {v["_batch_id"] for v in versions} >= {number}
        assert step_checkpoint(spark, history, HISTORY_STEP) == number
    # the column added in batch 2 is in the versions batch 2 opened (the batch path writes
    # them before the lake gains it; this process's catalog took the killed run's schema)
    assert any(v["city_code"] is not None for v in versions if v["_batch_id"] == 2)
    # every change is a version: more versions than keys, a late one among them
    keys = {v["_row_key"] for v in versions}
    assert len(versions) > len(keys)
    assert any(v["_batch_id"] > 1 and not v["_is_current"] and v["_closed_batch_id"] ==
               v["_batch_id"] for v in versions)
