"""Landing dir → raw tables, end to end: real files, real Spark, the session's table format.

Each test writes hourly partitions of trips changelog events, runs the files ingestion and
checks what is in raw.<job> and errors.<job>__raw and in the raw checkpoint."""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from python_ingest.config import JobConfig
from python_ingest.demo.files import trip_records, write_demo_partitions, write_file
from python_ingest.sources.files.leases import LEASE_SUFFIX, lease_dir, lease_file
from python_ingest.steps.ingest.land import IngestResult, ingest
from python_ingest.steps.jobs import job_status, run_ingest
from python_ingest.tables.checkpoints import read_checkpoint
from python_ingest.tables.names import JobTables
from python_ingest.tables.runs import Run
from tests.concurrency import run_concurrently
from tests.conftest import REPO, STATE_DIR, sluice_cmd

pytestmark = [pytest.mark.files, pytest.mark.e2e, pytest.mark.usefixtures("fresh_leases")]

SCHEMA = json.loads((REPO / "schemas" / "trips.avsc").read_text())
DAY = "dt=2026-11-23"


@pytest.fixture
def fresh_leases(job_name: str) -> None:
    """No partition leases left by an earlier session's job of the same name (job names
    repeat across sessions; the state dir is the repo's)."""
    shutil.rmtree(lease_dir(STATE_DIR, job_name))


def files_job(landing: Path, **extra: Any) -> dict[str, Any]:
    return {"source": "files", "path": str(landing), "schema": str(REPO / "schemas/trips.avsc"),
            "row_key": ["trip_id"], "settle_seconds": 0, **extra}


def drop(landing: Path, hour: int, first_ref: int, rows: int = 5, suffix: str = ".json",
         success: bool = True) -> Path:
    """Land one hourly partition of ``rows`` trips whose ref keys start at ``first_ref``."""
    folder = landing / DAY / f"hour={hour:02d}"
    write_file(folder / f"part-0{suffix}", trip_records(first_ref, rows, first_ref), SCHEMA)
    if success:
        (folder / "_SUCCESS").touch()
    return folder


def raw_refs(spark: Any, job: JobConfig) -> Counter[int]:
    return Counter(r["_ref_key"] for r in spark.table(JobTables(job.name).raw)
                   .select("_ref_key").collect())


def batch_refs(spark: Any, job: JobConfig) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for r in spark.table(JobTables(job.name).raw).select("_batch_id", "_ref_key").collect():
        out.setdefault(r["_batch_id"], set()).add(r["_ref_key"])
    return out


def done_keys(spark: Any, job: JobConfig) -> set[str]:
    checkpoint = read_checkpoint(spark, JobTables(job.name).raw)
    assert checkpoint is not None and checkpoint.files is not None
    return set(checkpoint.files.done)


@pytest.mark.reliability
def test_late_partition_lands_once_and_nothing_twice(spark: Any, make_settings: Any,
                                                     job_name: str, tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    drop(landing, 6, 100)
    drop(landing, 7, 200, suffix=".csv")
    job = make_settings({job_name: files_job(landing)}).job(job_name)

    first = run_ingest(spark, make_settings({job_name: files_job(landing)}), job)
    assert (first.batch_id, first.read, first.landed, first.errors) == (1, 10, 10, 0)
    drop(landing, 5, 300, suffix=".parquet")  # late: an hour before the ones processed
    second = run_ingest(spark, make_settings({job_name: files_job(landing)}), job)
    assert (second.batch_id, second.landed) == (2, 5)

    assert raw_refs(spark, job) == Counter(range(100, 105)) + Counter(range(200, 205)) \
        + Counter(range(300, 305))
    assert batch_refs(spark, job) == {1: set(range(100, 105)) | set(range(200, 205)),
                                      2: set(range(300, 305))}
    assert done_keys(spark, job) == {f"{DAY}/hour=05", f"{DAY}/hour=06", f"{DAY}/hour=07"}
    status = job_status(spark, make_settings({job_name: files_job(landing)}), job)
    assert status["batch_id"] == 2 and status["files"]["batch"] == [f"{DAY}/hour=05"]
    errors_checkpoint = read_checkpoint(spark, JobTables(job.name).raw_errors)
    assert errors_checkpoint is not None and errors_checkpoint.batch_id == 2
    coords = spark.table(JobTables(job.name).raw).select("_batch_id", "_kafka_partition",
                                                         "_kafka_offset")
    assert coords.count() == coords.distinct().count() == 15


@pytest.mark.reliability
def test_late_partition_below_the_watermark_is_reported_never_silently_skipped(
        spark: Any, make_settings: Any, job_name: str, tmp_path: Path,
        caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    """#35.3: a partition that lands after the watermark passed its key is skipped, and said
    so: a warning naming it, and a count in the run, the checkpoint and `sluice status`."""
    from python_ingest.cli.main import main
    from python_ingest.steps.pipeline import record_status

    landing = tmp_path / "landing"
    drop(landing, 7, 200)
    settings = make_settings({job_name: files_job(landing, lateness_seconds=0)})
    job = settings.job(job_name)
    first = run_ingest(spark, settings, job)  # lateness 0: hour=07 is folded at once
    assert first.batch_id == 1
    first_files = read_checkpoint(spark, JobTables(job.name).raw)
    assert first_files is not None and first_files.files is not None
    assert first_files.files.watermark == f"{DAY}/hour=07"
    late = f"{DAY}/hour=05"
    drop(landing, 5, 300)  # older than the watermark: too late to be taken

    caplog.set_level("WARNING", logger="python_ingest")
    run = Run(job=job.name)
    skipped = ingest(spark, settings, job, run)
    assert skipped.up_to_date  # skipped, as documented ...
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(late in m and "late" in m for m in warned), warned  # ... but never silently
    assert run.counts["late_partitions"] == 1 and run.details["partitions_late"] == [late]
    run.outcome = "up-to-date"
    record_status(spark, settings, run, skipped.checkpoint, None)
    capsys.readouterr()
    assert main(["--config", str(tmp_path / "sluice.yml"), "status", job_name, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["jobs"][job_name]
    assert shown["late_partitions"] == 1 and shown["backlog"] == 0
    assert main(["--config", str(tmp_path / "sluice.yml"), "status", job_name]) == 0
    assert "1 late partition" in capsys.readouterr().out

    drop(landing, 8, 400)  # the next batch records the late one in its checkpoint
    caplog.clear()
    landed = run_ingest(spark, settings, job)
    assert (landed.batch_id, landed.landed) == (2, 5)
    assert raw_refs(spark, job) == Counter(range(200, 205)) + Counter(range(400, 405))
    assert landed.checkpoint is not None and landed.checkpoint.files is not None
    assert landed.checkpoint.files.late == (late,)
    again = Run(job=job.name)
    assert ingest(spark, settings, job, again).up_to_date
    assert again.counts["late_partitions"] == 1  # still counted, no longer news
    assert again.details["partitions_late"] == []


@pytest.mark.reliability
def test_settling_partition_waits_until_stable_or_marked(spark: Any, make_settings: Any,
                                                         job_name: str, tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    growing = drop(landing, 7, 100, success=False)
    marked = drop(landing, 8, 200, success=False)
    settings = make_settings({job_name: files_job(landing, settle_seconds=30)})
    job = settings.job(job_name)

    waiting = run_ingest(spark, settings, job)
    assert waiting.up_to_date  # both were just written
    (marked / "_SUCCESS").touch()
    with open(growing / "part-0.json", "a") as out:  # still being copied
        out.write(json.dumps(trip_records(105, 1, 105)[0]) + "\n")
    marked_only = run_ingest(spark, settings, job)
    assert (marked_only.batch_id, marked_only.landed) == (1, 5)
    assert done_keys(spark, job) == {f"{DAY}/hour=08"}
    then = time.time() - 60  # the copy stopped a minute ago: settled
    for path in (growing, growing / "part-0.json"):
        os.utime(path, (then, then))
    settled = run_ingest(spark, settings, job)
    assert (settled.batch_id, settled.landed) == (2, 6)
    assert raw_refs(spark, job) == Counter(range(100, 106)) + Counter(range(200, 205))


def test_backlog_is_taken_oldest_first_within_max_partitions(
        spark: Any, make_settings: Any, job_name: str, tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    for hour in (2, 0, 1):  # landed in any order: taken by key
        drop(landing, hour, 100 * (hour + 1), rows=2)
    settings = make_settings({job_name: files_job(landing, max_partitions=2)})
    job = settings.job(job_name)
    first = run_ingest(spark, settings, job)
    assert first.landed == 4
    second = run_ingest(spark, settings, job)  # the rest: the run after is up to date
    assert second.landed == 2
    assert batch_refs(spark, job) == {1: {100, 101, 200, 201}, 2: {300, 301}}


@pytest.mark.reliability
def test_bad_file_goes_to_errors_with_its_path_and_the_rest_lands(
        spark: Any, make_settings: Any, job_name: str, tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    folder = drop(landing, 7, 100)
    (folder / "part-1.avro").write_bytes(b"Obj\x01 truncated container")
    records = trip_records(200, 3, 200)
    records[1]["trip_id"] = None
    write_file(folder / "part-2.csv", records, SCHEMA)
    settings = make_settings({job_name: files_job(landing)})
    job = settings.job(job_name)

    result = run_ingest(spark, settings, job)
    assert (result.read, result.landed, result.errors) == (9, 7, 2)
    assert raw_refs(spark, job) == Counter([100, 101, 102, 103, 104, 200, 202])
    errors = spark.table(JobTables(job.name).raw_errors).orderBy("_kafka_partition").collect()
    assert [(e["_batch_id"], e["_kafka_partition"], e["_kafka_offset"]) for e in errors] == [
        (1, 1, None), (1, 2, 1)]
    assert str(folder / "part-1.avro") in errors[0]["error_exception"]
    assert "cannot parse as avro" in errors[0]["error_exception"]
    assert str(folder / "part-2.csv") in errors[1]["error_exception"]
    assert "row key column 'trip_id' is null" in errors[1]["error_exception"]
    assert json.loads(errors[1]["error_source_data"])["_ref_key"] == 201


def test_partition_lease_of_another_run_is_respected_then_retaken_after_expiry(
        spark: Any, make_settings: Any, job_name: str, tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    drop(landing, 6, 100)
    drop(landing, 7, 200)
    settings = make_settings({job_name: files_job(landing, lease_timeout=300)})
    job = settings.job(job_name)
    folder = lease_dir(STATE_DIR, job_name)
    lease = lease_file(folder, f"{DAY}/hour=07")
    holder = {"run": "other-run", "token": "t1", "host": "elsewhere", "pid": 1,
              "taken_at": time.time()}
    lease.write_text(json.dumps(holder))

    first = run_ingest(spark, settings, job)
    assert first.landed == 5 and done_keys(spark, job) == {f"{DAY}/hour=06"}
    assert lease.exists()  # another run's lease is not ours to drop
    lease.write_text(json.dumps({**holder, "taken_at": time.time() - 301}))  # that run died
    retaken = run_ingest(spark, settings, job)
    assert (retaken.batch_id, retaken.landed) == (2, 5)
    assert raw_refs(spark, job) == Counter(range(100, 105)) + Counter(range(200, 205))
    assert list(folder.glob("*" + LEASE_SUFFIX)) == []  # released after its commit


@pytest.mark.reliability
def test_two_concurrent_runs_land_each_partition_exactly_once(
        spark: Any, make_settings: Any, job_name: str, tmp_path: Path) -> None:
    """Two runs of the job at once, without the job lease (as after a job lease take-over):
    partition leases split the work and the commit lock keeps every partition once."""
    landing = tmp_path / "landing"
    settings = make_settings({job_name: files_job(landing, max_partitions=2)})
    job = settings.job(job_name)
    assert ingest(spark, settings, job, Run(job=job.name)).up_to_date  # creates the tables
    for hour in range(8):
        drop(landing, hour, 100 * (hour + 1), rows=3)
    results: list[IngestResult] = []
    failures: list[BaseException] = []
    start = threading.Barrier(2)

    def runs() -> None:
        start.wait()
        try:
            while not (result := ingest(spark, settings, job, Run(job=job.name))).up_to_date:
                results.append(result)
        except BaseException as exc:  # noqa: BLE001  # reported by the test
            failures.append(exc)

    run_concurrently(runs)
    assert failures == []
    expected = Counter(r for hour in range(8) for r in range(100 * (hour + 1),
                                                              100 * (hour + 1) + 3))
    assert raw_refs(spark, job) == expected  # each partition once
    assert sum(r.landed for r in results) == 24
    assert sorted(r.batch_id or 0 for r in results) == list(range(1, len(results) + 1))
    assert len(done_keys(spark, job)) == 8


@pytest.mark.reliability
def test_killed_between_read_and_commit_then_rerun_lands_each_partition_once(
        spark: Any, make_settings: Any, job_name: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """kill -9 of the real CLI after reading, before committing; then a run that fails
    between its raw and its error commit (as a kill there would leave it); then a rerun."""
    from python_ingest.steps.ingest import files as ingest_files

    landing = write_demo_partitions(tmp_path, hours=2, rows_per_file=4)
    (landing / DAY / "hour=05" / "part-1.json").write_text("{broken\n")
    settings = make_settings({job_name: files_job(landing)})
    job = settings.job(job_name)
    killed = sluice_cmd(tmp_path / "sluice.yml", "ingest", job_name,
                        env={"SLUICE_FAULT": "before_raw_commit"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert "killing the process at 'before_raw_commit'" in killed.stderr
    assert read_checkpoint(spark, JobTables(job.name).raw) is None  # nothing committed
    assert len(list(lease_dir(STATE_DIR, job_name).glob("*" + LEASE_SUFFIX))) == 2

    commit = ingest_files.append_with_checkpoint

    def dies_at_the_error_commit(df: Any, table: str, *args: Any) -> None:
        if table == JobTables(job.name).raw_errors:
            raise RuntimeError("died between the commits")
        commit(df, table, *args)

    monkeypatch.setattr(ingest_files, "append_with_checkpoint", dies_at_the_error_commit)
    with pytest.raises(RuntimeError, match="between the commits"):
        run_ingest(spark, settings, job)  # the dead run's leases: its process is gone
    monkeypatch.undo()
    raw_checkpoint = read_checkpoint(spark, JobTables(job.name).raw)
    assert raw_checkpoint is not None and raw_checkpoint.batch_id == 1
    assert read_checkpoint(spark, JobTables(job.name).raw_errors) is None

    rerun = run_ingest(spark, settings, job)
    assert rerun.up_to_date
    assert raw_refs(spark, job) == Counter(range(1, 9))
    errors = spark.table(JobTables(job.name).raw_errors).collect()
    assert len(errors) == 1 and "part-1.json" in errors[0]["error_exception"]
    assert errors[0]["_batch_id"] == 1
    error_checkpoint = read_checkpoint(spark, JobTables(job.name).raw_errors)
    assert error_checkpoint is not None and error_checkpoint.batch_id == 1
    assert list(lease_dir(STATE_DIR, job_name).glob("*" + LEASE_SUFFIX)) == []
