"""The transform half of a job inside a plain ``dbt run``: converter, fork and merge under the
job's lease, committing the checkpoints the runner commits.

``dbt run`` (or ``dbt build``) in a sluice project runs the converters itself. The dbt_sluice
plugin gives dbt-spark's adapter the functions below (``adapter.sluice_*`` in the macros):

- a converter's incremental filter (macros/sluice_new_batches.sql) first takes its job's
  lease (``hold``). When another run holds it (a runner, a ``sluice run``), the converter
  appends nothing and the log names the holder. The lease is kept until the job's lake model
  is done, or until dbt exits;
- a lake model's materialization (macros/materializations/lake_merge.sql) asks for its plan
  (``plan_lake``): the Great Expectations fork of what the converter staged (the same fork as
  the runner's: valid rows on, failing rows to the error table), then the batches to merge.
  For each batch the model's SQL is rendered again with the batch's names (``var``), and its
  inserts and MERGE run through ``commit_merge``, which commits them with the merge
  checkpoint (``sluice.merge.batch_id``) exactly as the runner does;
- ``finish`` records the run in meta.runs and the status file, then releases the lease.

Under the runner (dbt in-process inside ``sluice run``) the runner already holds the lease and
passes the vars itself: ``hold`` finds the lease held by this process, and nothing else here
runs. So a runner and a ``dbt run`` at once never apply a batch twice: whichever takes a job's
lease first does its batches, the other leaves the job alone.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import threading
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from python_ingest.config import Settings, load_settings
from python_ingest.config.table_formats import session_format
from python_ingest.exceptions import PipelineError
from python_ingest.runtime.catalog import (
    bucket_write,
    drop_scratch,
    insert_operation_kept,
    keep_write_settings,
    location,
)
from python_ingest.runtime.catalog import lake_properties as catalog_lake_properties
from python_ingest.runtime.faults import fault_point
from python_ingest.steps.dbt import project_dir, thread_session
from python_ingest.steps.pipeline import (
    MERGE_STEP,
    fork_staged,
    merged_counts,
    pending_merges,
    record_status,
)
from python_ingest.tables.checkpoints import read_checkpoint, step_properties
from python_ingest.tables.formats import committing, table_exists
from python_ingest.tables.lease import LeaseHeldError, check_held, holds, job_lease
from python_ingest.tables.names import JobModels, JobTables
from python_ingest.tables.runs import Run

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# one fork or merge commit at a time in a dbt process: Great Expectations' state is process-wide,
# and on Hudi a merge's checkpoint rides in session settings every commit of the session reads
# (with dbt threads > 1, another job's fork would otherwise carry this job's merge checkpoint)
_commit_lock = threading.Lock()
_jobs_lock = threading.Lock()
_current = threading.local()  # the batch this dbt thread is merging (``var``)


@dataclass
class _Job:
    """A job this dbt process holds: its lease and its run, recorded by ``finish``."""

    lease: ExitStack
    run: Run
    tables: JobTables | None = None
    report: str | None = None
    merged: list[dict[str, Any]] = field(default_factory=list)


_jobs: dict[str, _Job] = {}


@dataclass(frozen=True)
class _Batch:
    tables: JobTables
    batch_id: int
    skip: tuple[str, ...]


@functools.cache
def _settings_now() -> Settings:
    """sluice.yml as this dbt process sees it (read once)."""
    return load_settings(env=dict(os.environ))


def _spark() -> SparkSession:
    """The session dbt-spark runs this thread's statements on (the JVM's for the thread, else
    the one the dbt_sluice plugin opened)."""
    from pyspark.sql import SparkSession

    session = thread_session() or SparkSession._instantiatedSession
    if session is None:
        raise PipelineError("dbt has no Spark session: sluice's steps run only inside a dbt "
                            "command that opened one (dbt run, dbt build)")
    return session


def hold(job: str) -> str | None:
    """Take ``job``'s lease for this dbt process; None when this process holds it (now, or
    already: the runner), else why not (who holds it)."""
    if holds(job):
        return None
    _check_format(job)
    with _jobs_lock:
        if job in _jobs:
            return None
        lease = ExitStack()
        try:
            lease.enter_context(job_lease(_spark(), job))
        except LeaseHeldError as exc:
            log.warning("dbt leaves job %s alone: %s", job, exc)
            return str(exc)
        run = Run(job=job)
        run.details.update(steps=["staging", "fork", "merge"], via="dbt")
        _jobs[job] = _Job(lease, run)
    log.info("dbt holds job %s's lease until its lake model is merged", job)
    return None


def _check_format(job: str) -> None:
    """Refuse a job whose own table_format is not the format this dbt session writes:
    dbt-spark names a table ``schema.table`` in the session's one default catalog, and the
    job's tables live in its own format's catalog."""
    settings = _settings_now()
    config = settings.jobs.get(job)
    writes = session_format(_spark()).name
    if config is not None and settings.format_of(config) != writes:
        raise PipelineError(
            f"job {job} keeps its tables in {settings.format_of(config)} (its table_format) and "
            f"this dbt run writes {writes}, the project's format; a plain dbt run names tables "
            f"in one catalog, so `sluice run {job}` builds this job (it runs dbt on a session "
            f"of the job's format); leave its models out here: dbt run --exclude "
            f"<its staging and lake models>")


def plan_lake(job: str, staging_model: str, lake_model: str) -> dict[str, Any]:
    """The fork of what ``staging_model`` staged, then the batches ``lake_model`` has yet to
    merge: ``{"batches": [{"batch_id", "skip"}...]}``, or ``{"skip": why}`` when another
    run holds the job."""
    _current.batch = None  # whatever an earlier, failed merge on this thread left
    why = hold(job)
    if why is not None:
        return {"skip": why}
    held = _jobs.get(job)
    if held is None:  # the runner's own lease: the runner passes the batch itself
        return {"skip": f"job {job} is run by this process's runner"}
    spark = _spark()
    tables = JobTables(job, JobModels(staging_model, lake_model))
    held.tables = tables
    settings = _settings_now()
    with _commit_lock:
        held.report = fork_staged(spark, settings, project_dir(settings), tables, held.run)
    batches = pending_merges(spark, tables)
    log.info("dbt: job %s has %d batch(es) to merge into %s", job, len(batches), tables.lake)
    return {"batches": [{"batch_id": b, "skip": list(s)} for b, s in batches]}


def begin_merge(job: str, batch_id: int, skip: list[str]) -> None:
    """Make ``batch_id`` the one this thread's lake model renders (``var``)."""
    held = _jobs[job]
    assert held.tables is not None
    _current.batch = _Batch(held.tables, int(batch_id), tuple(skip))
    changes = held.tables.merge_changes
    if changes:
        drop_scratch(_spark(), changes)  # an earlier process's, if it is still there


def var(name: str) -> Any:
    """The runner's dbt vars for the batch this thread merges (None outside a merge)."""
    batch: _Batch | None = getattr(_current, "batch", None)
    if batch is None:
        return None
    if name == "sluice_batch_id":
        return batch.batch_id
    if name == "sluice_skip":
        return list(batch.skip)
    if name == "sluice_has_target":
        return table_exists(_spark(), batch.tables.lake or "")
    return batch.tables.dbt_vars().get(name)


def commit_merge(statements: list[str]) -> dict[str, int]:
    """Run the batch's inserts and MERGE so that their commits carry the merge checkpoint."""
    batch: _Batch | None = getattr(_current, "batch", None)
    if batch is None:
        raise PipelineError("commit_merge outside a merge (begin_merge first)")
    _current.batch = None
    spark = _spark()
    check_held(batch.tables.job)
    statements = [s for s in statements if s.strip()]
    with _commit_lock, insert_operation_kept(spark):
        committing(spark, step_properties(MERGE_STEP, batch.batch_id),
                   lambda: [spark.sql(s) for s in statements])
    counts = merged_counts(spark, batch.tables, batch.batch_id, list(batch.skip))
    held = _jobs[batch.tables.job]
    held.merged.append({"batch_id": batch.batch_id, "skipped": list(batch.skip), **counts})
    if "lake" not in batch.skip:
        for name, value in counts.items():
            held.run.count(name, held.run.counts.get(name, 0) + value)
    return counts


def history(job: str, config: dict[str, Any]) -> str:
    """The lake model's history (``config``: its history settings) for every batch merged
    and not yet in it (python_ingest/steps/history/writer.py), after the model's merges."""
    from python_ingest.steps.history import writer

    held = _jobs.get(job)
    if held is None or held.tables is None:
        return ""
    opts = writer.options_of(config, f"the lake model of job {job}")
    with _commit_lock:
        writer.catch_up(_spark(), None, held.tables, opts=opts)
    return ""


def finish(job: str) -> dict[str, int]:
    """Record the job's run (meta.runs, the status file) and release its lease."""
    with _jobs_lock:
        held = _jobs.pop(job, None)
    if held is None:
        return {}
    try:
        run = held.run
        run.details["merge"] = held.merged
        outcome = "succeeded" if any(run.counts.values()) else "up-to-date"
        run.outcome = outcome
        spark = _spark()
        if held.merged:
            run.batch_id = max(m["batch_id"] for m in held.merged)
        checkpoint = read_checkpoint(spark, held.tables.raw) if held.tables else None
        record_status(spark, _settings_now(), run, checkpoint, held.tables)
        run.finish(spark, outcome)
        return dict(run.counts)
    finally:
        held.lease.close()


@atexit.register
def _release_all() -> None:
    """Leases of jobs whose lake model did not run (failed, not selected) end with dbt."""
    with _jobs_lock:
        left = list(_jobs.values())
        _jobs.clear()
    for held in left:
        held.lease.close()


def keep_settings(table: str, settings: dict[str, str]) -> str:
    """Keep a new Hudi lake table's bucket-index settings beside its hoodie.properties (the
    lake_merge materialization, right after it creates the table), so every later process
    registers it with them (runtime/catalog.py keep_write_settings)."""
    spark = _spark()
    keep_write_settings(spark, location(spark, table), dict(settings))
    return ""


def lake_properties(table_format: str, bucket: dict[str, str]) -> dict[str, str]:
    """A new lake table's properties (macros/sluice_lake_properties.sql; the batch path
    creates a lake with the same: runtime/catalog.py)."""
    return catalog_lake_properties(str(table_format), dict(bucket or {}))


def bucket_index(buckets: int) -> dict[str, str]:
    """A new bucket lake's index settings (macros/sluice_lake_index.sql)."""
    return bucket_write(int(buckets))


def fault(name: str) -> str:
    """A fault point inside a merge's statements (crash tests, runtime/faults.py)."""
    fault_point(name)
    return ""


def widen(table: str, columns: list[Any]) -> str:
    """Widen the columns of ``table`` whose type the rows about to be written widen (the
    staging converter's append, the lake_merge materialization): tables/evolve.py, which
    stops the run with a ColumnTypeChangeError on a narrowing."""
    from python_ingest.tables.evolve import widen as widen_columns

    widen_columns(_spark(), table, [(str(name), str(kind)) for name, kind in columns])
    return ""
