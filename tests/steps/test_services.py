"""Table services by hand (`sluice maintain`): after compaction, cleaning and archival the lake
still equals the source, checkpoints still read, and a change older than a delete that arrives
after the compaction stays dropped. On both table formats. Inline, per job: the lake's
services run after every ``services.compact_every``-th merged batch. Raw rows of merged
batches expire after ``services.raw_retention``, except those a replay may need."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from python_ingest.demo import trips as demo
from python_ingest.demo.trips import Event, TripsGenerator
from python_ingest.kafka import broker as broker_mod
from python_ingest.runtime.catalog import location
from python_ingest.steps.dbt import Dbt
from python_ingest.steps.pipeline import run_job
from python_ingest.steps.services import batch_ranges, expire_raw, maintain_job
from python_ingest.tables.checkpoints import read_checkpoint, step_checkpoint
from python_ingest.tables.formats import SMALL_FILES_MIN, live_files
from python_ingest.tables.runs import flush_records
from tests.conftest import REPO, trips_job
from tests.steps.helpers import as_lake, lake_rows


@pytest.mark.e2e
def test_maintain_keeps_the_lake_and_deleted_rows_stay_deleted(
        format_spark: Any, broker: str, make_settings: Any, project: Any, job_name: str,
        table_format: str) -> None:
    spark = format_spark
    project(job_name)
    # compaction after every 2nd merge, not Hudi's default 5th: the job's setting must reach
    # the merge's writer
    # and the step tables' small files rewritten after the 3rd (kept every batch here:
    # keep_step_tables; the batch path writes none)
    settings = make_settings({job_name: trips_job(job_name, keep_step_tables=True, services={
        "compact_every": 2, "keep_commits": 2, "steps_compact_every": 3})},
        table_format=table_format)
    job = settings.job(job_name)
    broker_mod.ensure_topic(broker, job.topic, 2)
    dbt = Dbt(settings)
    generator = TripsGenerator(demo.trips_schema(REPO), seed=5, first_trip_id=1,
                               malformed_rate=0.0, duplicate_rate=0.0)
    services = []
    for number in range(3):  # three merges: delta commits to compact on Hudi
        demo.produce(broker, job.topic, generator.events(120))
        result = run_job(spark, settings, job, dbt=dbt)
        services.append(_services_run(spark, result.run_id))
        if number == 1:
            rows_before = _step_rows(spark, result.tables)
    assert result.tables is not None and result.tables.lake is not None
    tables = result.tables
    # the lake's services ran after batch 2, the step tables' after batch 3 (the index's
    # every 20: never here)
    assert [[s["service"] for s in run] for run in services] == [
        [], ["compact"], ["compact_files"] * 5]
    assert services[1][0]["table"] == tables.lake
    # the step tables with SMALL_FILES_MIN files or more (a file or more per batch) read one
    # or two now; the others were left as they are
    rewritten = {s["table"]: (s["files_before"], s["files_after"]) for s in services[2]}
    assert set(rewritten) == {tables.raw, tables.raw_errors, tables.staging, tables.valid,
                              tables.errors}
    assert rewritten[tables.raw][0] >= SMALL_FILES_MIN <= rewritten[tables.valid][0]
    for table, (before, after) in rewritten.items():
        assert after <= 2 if before >= SMALL_FILES_MIN else after == before, (table, before,
                                                                               after)
        assert live_files(spark, table) == after
    # ... with their rows: the third batch's added to the ones before, none lost or doubled
    assert _step_rows(spark, tables) == {
        table: count + result.counts[figure] for (table, count), figure in zip(
            rows_before.items(), ("landed", "landed", "valid"), strict=True)}
    if table_format == "hudi":
        assert any("cleaned" in line for line in services[1][0]["done"])
    deleted = [e for e in generator.history if e.kind == "delete"]
    assert deleted, "the generator deleted no row: the test would prove nothing"

    # a file of a write that crashed before its commit, older than the orphan age
    orphan = Path(location(spark, tables.lake)) / "data" / "crashed-writer.parquet"
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_bytes(b"PAR1")
    old = time.time() - 4 * 24 * 3600
    os.utime(orphan, (old, old))

    done = maintain_job(spark, dbt, job)

    assert set(done) >= {tables.raw, tables.lake}
    if table_format == "hudi":  # (small merges rewrite base files: maybe nothing to compact)
        assert any("compacted" in line for line in done[tables.lake])
        assert any("cleaned" in line for line in done[tables.raw])
    else:  # snapshots: the newest 2, none older than a checkpoint's; the orphan removed
        assert spark.sql(f"select count(*) from {tables.raw}.snapshots").collect()[0][0] == 2
        assert any(re.match(r"expired [1-9]\d* snapshot", line) for line in done[tables.raw])
        assert not orphan.exists()
        assert any("removed 1 orphan file" in line for line in done[tables.lake])
    expected = {trip_id: as_lake(row) for trip_id, row in generator.rows.items()}
    assert lake_rows(spark, tables.lake) == expected
    assert read_checkpoint(spark, tables.raw).batch_id == 3  # type: ignore[union-attr]
    assert step_checkpoint(spark, tables.lake, "merge") == 3

    # the deleted rows' older changes, re-delivered after the compaction: still deleted
    gone = {int(d.key) for d in deleted if d.key is not None}
    late = [e for e in generator.history if e.kind in ("create", "update", "partial")
            and e.key is not None and int(e.key) in gone]
    assert late
    demo.produce(broker, job.topic, iter(Event(e.key, e.value, "late", e.record) for e in late))
    result = run_job(spark, settings, job, dbt=dbt)
    assert result.counts["landed"] == len(late)
    assert lake_rows(spark, tables.lake) == expected


def _step_rows(spark: Any, tables: Any) -> dict[str, int]:
    """Rows of the raw, staging and valid tables."""
    return {t: spark.table(t).count() for t in (tables.raw, tables.staging, tables.valid)}


def _services_run(spark: Any, run_id: str) -> list[dict[str, Any]]:
    """The table services a run recorded in meta.runs (``details.services``)."""
    from python_ingest.runtime.session import active, project_session

    flush_records()  # the records this process holds (tests/conftest.py)
    with active(project_session(spark)) as session:  # meta.runs: the project's format
        details = session.sql(f"select details from meta.runs where run_id = '{run_id}'"
                              ).collect()[0]["details"]
    return list(json.loads(details).get("services", []))


@pytest.mark.e2e
def test_raw_rows_of_merged_batches_expire_but_what_a_replay_needs_stays(
        spark: Any, broker: str, make_settings: Any, project: Any, job_name: str) -> None:
    project(job_name)
    settings = make_settings({job_name: trips_job(job_name)})
    job = settings.job(job_name)
    broker_mod.ensure_topic(broker, job.topic, 2)
    dbt = Dbt(settings)
    clean = TripsGenerator(demo.trips_schema(REPO), seed=8, first_trip_id=1,
                           malformed_rate=0.0, duplicate_rate=0.0, invalid_rate=0.0)
    faulty = TripsGenerator(demo.trips_schema(REPO), seed=9, first_trip_id=10_000,
                            malformed_rate=0.0, duplicate_rate=0.0, invalid_rate=0.2)
    runs = []
    for generator in (clean, faulty, clean):  # batch 2 has expectation errors
        demo.produce(broker, job.topic, generator.events(80))
        runs.append(run_job(spark, settings, job, dbt=dbt))
    tables = runs[-1].tables
    assert tables is not None and tables.lake is not None
    assert runs[1].counts["expectation_errors"] > 0 and runs[0].counts["expectation_errors"] == 0
    lake_before = lake_rows(spark, tables.lake)
    per_batch = _raw_per_batch(spark, tables.raw)
    assert set(per_batch) == {1, 2, 3}

    # a week's retention: nothing is old enough
    assert expire_raw(spark, tables, 7 * 24 * 3600) == 0
    # an hour's, an hour from now: batches 1 and 3 go; batch 2 (its error rows may be replayed)
    # stays whole; the ingest checkpoint and the lake do not change
    later = datetime.now(UTC) + timedelta(hours=1, minutes=1)
    expired = expire_raw(spark, tables, 3600, now=later)
    assert expired == per_batch[1] + per_batch[3]
    assert _raw_per_batch(spark, tables.raw) == {2: per_batch[2]}
    assert read_checkpoint(spark, tables.raw).batch_id == 3  # type: ignore[union-attr]
    assert lake_rows(spark, tables.lake) == lake_before
    assert expire_raw(spark, tables, None, now=later) == 0  # raw_retention: forever

    # ingesting goes on from the checkpoint; the new batch is not expired before it is merged
    demo.produce(broker, job.topic, clean.events(40))
    result = run_job(spark, settings, job, dbt=dbt)
    assert result.batch_id == 4 and result.counts["landed"] == 40
    assert set(_raw_per_batch(spark, tables.raw)) == {2, 4}


def _raw_per_batch(spark: Any, raw: str) -> dict[int, int]:
    return {int(r[0]): int(r[1]) for r in spark.sql(
        f"select _batch_id, count(*) from {raw} group by 1").collect()}


def test_expired_batches_become_one_range_per_run_of_numbers() -> None:
    assert batch_ranges([3]) == "_batch_id = 3"
    assert batch_ranges([1, 2, 3, 7, 9, 10]) == (
        "_batch_id between 1 and 3 or _batch_id = 7 or _batch_id between 9 and 10")


def _timeline(lake: Path) -> list[str]:
    folder = lake / ".hoodie" / "timeline"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


@pytest.mark.e2e
@pytest.mark.reliability
@pytest.mark.parametrize("inside", ["lake_compaction", "raw_clustering"])
def test_kill_inside_a_compaction_then_the_next_run_and_maintain_finish_it(
        spark: Any, broker: str, make_settings: Any, project: Any, job_name: str,
        inside: str) -> None:
    """SIGKILL of `sluice maintain` while the lake's compaction is inflight, or the raw
    table's clustering (``compact_files``; Hudi): the next batch lands and merges correctly
    beside the pending service, the next maintain completes it, and the lake equals the source
    and the raw table holds every offset once throughout."""
    project(job_name)
    settings = make_settings({job_name: trips_job(job_name, services={
        "compact_every": 0, "steps_compact_every": 0})})
    job = settings.job(job_name)
    broker_mod.ensure_topic(broker, job.topic, 2)
    dbt = Dbt(settings)
    generator = TripsGenerator(demo.trips_schema(REPO), seed=8, first_trip_id=1,
                               malformed_rate=0.0, duplicate_rate=0.0)
    demo.produce(broker, job.topic, generator.events(400))
    tables = run_job(spark, settings, job, dbt=dbt).tables
    assert tables is not None and tables.lake is not None
    lake = Path(location(spark, tables.lake))
    demo.produce(broker, job.topic, generator.changes(150))  # no inserts: log files
    run_job(spark, settings, job, dbt=dbt)
    assert list(lake.rglob("*.log.*")), "no log file: the compaction would have nothing to do"
    suffixes: tuple[str, ...]
    if inside == "lake_compaction":
        folder, suffixes = lake, (".compaction.inflight",)
    else:  # two batches: four raw files to cluster
        folder, suffixes = Path(location(spark, tables.raw)), (".clustering.inflight",
                                                               ".replacecommit.inflight")

    log = settings.root / "maintain.log"  # a file: Spark's logs would fill a pipe
    with open(log, "w") as out:
        maintain = subprocess.Popen(
            [sys.executable, "-m", "python_ingest.cli", "--config",
             str(settings.root / "sluice.yml"), "maintain", job_name], stdout=out,
            stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True,
            env={**os.environ, "SLUICE_DBT_PROJECT_DIR": str(dbt.project)})
    deadline = time.monotonic() + 300
    while not any(n.endswith(suffixes) for n in _timeline(folder)):
        assert maintain.poll() is None, f"maintain ended before its {inside} was seen " \
            "inflight:\n" + log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"no {inside} inflight within 300s"
        time.sleep(0.05)
    os.killpg(maintain.pid, signal.SIGKILL)
    maintain.wait(timeout=60)
    pending = [n for n in _timeline(folder) if n.endswith(suffixes)]
    instant = pending[0].split(".")[0]
    assert pending and not _completed(folder, instant), f"the {inside} completed anyway"
    expected = {trip_id: as_lake(row) for trip_id, row in generator.rows.items()}
    assert lake_rows(spark, tables.lake) == expected
    assert _raw_offsets(spark, tables.raw) == (550, 550)

    demo.produce(broker, job.topic, generator.events(200))
    result = run_job(spark, settings, job, dbt=dbt)
    assert result.outcome == "succeeded"
    expected = {trip_id: as_lake(row) for trip_id, row in generator.rows.items()}
    assert lake_rows(spark, tables.lake) == expected
    assert _raw_offsets(spark, tables.raw) == (750, 750)

    maintain_job(spark, dbt, job)
    assert _completed(folder, instant), f"the interrupted {inside} was not completed: " \
        f"{_timeline(folder)}"
    assert lake_rows(spark, tables.lake) == expected
    assert _raw_offsets(spark, tables.raw) == (750, 750)
    assert step_checkpoint(spark, tables.lake, "merge") == 3
    assert read_checkpoint(spark, tables.raw).batch_id == 3  # type: ignore[union-attr]


def _completed(table: Path, instant: str) -> bool:
    """Whether the Hudi instant ``instant`` completed (a compaction's ``.commit``, a
    clustering's ``.replacecommit``)."""
    return any(n.startswith(f"{instant}_") and n.endswith((".commit", ".replacecommit"))
               for n in _timeline(table))


def _raw_offsets(spark: Any, raw: str) -> tuple[int, int]:
    """Rows of the raw table and distinct (partition, offset) among them."""
    row = spark.sql(f"select count(*), count(distinct _kafka_partition, _kafka_offset) "
                    f"from {raw}").collect()[0]
    return int(row[0]), int(row[1])
