"""The runner: one job from Kafka to its lake table, as one recorded run.

    ingest   Kafka → raw.<job>                         checkpoint: offsets + batch id (raw)
    staging  dbt converter → staging.<model>           checkpoint: max(_batch_id) of staging
    fork     GE suite → staging.<model>__valid,        checkpoint: sluice.fork.batch_id
             errors.<job>                                  (in both tables' commits)
    merge    dbt lake model, one MERGE per raw batch   checkpoint: sluice.merge.batch_id
             → lake.<model>, errors.<job>,                 (in each table's commit)
               meta.<job>__index (deletes too)
    reports  GE Data Docs under <state_dir>/reports/<job>/, counts and quality in meta.runs
    disperse the job's dispersal targets (sinks/): what the merge changed → PostgreSQL,
             Kafka                                     position: in each target

Every step reads its own checkpoint and works on what the step before it committed beyond
it, so a crash anywhere and a rerun neither skip nor repeat a batch (docs/pipeline.md).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from python_ingest.config import JobConfig, Settings
from python_ingest.exceptions import PipelineError, SluiceError
from python_ingest.runtime.catalog import drop_scratch, insert_operation_kept
from python_ingest.runtime.cost import Meter, metered
from python_ingest.runtime.faults import fault_point
from python_ingest.runtime.files import private_dir
from python_ingest.runtime.session import active, for_job
from python_ingest.steps.batch import run_batches, why_not
from python_ingest.steps.dbt import Dbt
from python_ingest.steps.fork.split import ERROR_COLUMNS, DocsJob, fork, suite_path
from python_ingest.steps.history import writer as history_writer
from python_ingest.steps.ingest.land import ingest
from python_ingest.steps.merge import index_cache
from python_ingest.steps.merge.index import MERGE_STEP, ensure_index
from python_ingest.steps.services import due_services
from python_ingest.tables.checkpoints import (
    Checkpoint,
    read_checkpoint,
    step_checkpoint,
    step_properties,
)
from python_ingest.tables.formats import (
    committing,
    ensure_table,
    name_tables,
    refresh_schemas,
    table_exists,
)
from python_ingest.tables.lease import check_held, job_lease
from python_ingest.tables.names import JobTables
from python_ingest.tables.runs import Run
from python_ingest.tables.status import StatusFile

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

STEP_COUNTS = ("read", "landed", "decode_errors", "valid", "expectation_errors", "inserted",
               "updated", "deleted", "merge_errors")


@dataclass
class PipelineResult:
    """What one run of a job did."""

    job: str
    run_id: str
    outcome: str
    batch_id: int | None
    counts: dict[str, int] = field(default_factory=dict)
    report: str | None = None
    tables: JobTables | None = None
    checkpoint: Checkpoint | None = None  # the raw checkpoint after the run
    error: str | None = None  # why the run failed (outcome "failed")
    merged: list[int] = field(default_factory=list)  # the batches it merged into the lake


def report_dir(settings: Settings, job: str) -> Path:
    """Where the GE Data Docs of ``job`` are written (index.html). The reports folder is
    created owner-only (0700): the reports quote source rows."""
    return private_dir(settings.path(settings.state_dir) / "reports") / job


def expectation_pages(settings: Settings, job: str) -> Path | None:
    """Where the fork writes ``job``'s Great Expectations page: ``report_dir``, or None when
    the project writes no pages as runs go (``reports: false``: no GE import, no render)."""
    return report_dir(settings, job) if settings.reports else None


# What lands a run's raw batch under the job's lease (ingest, or a replay of error rows):
# returns the raw checkpoint after it
Lander = Callable[[Run], "Checkpoint | None"]


def run_job(spark: SparkSession, settings: Settings, job: JobConfig,
            accept_data_loss: bool = False, dbt: Dbt | None = None,
            raise_failure: bool = True, land: tuple[str, Lander] | None = None,
            inline_services: bool = True,
            defer: Callable[[DocsJob], None] | None = None) -> PipelineResult:
    """Ingest, convert, fork, merge and report one job, recorded as one run in meta.runs.

    ``land`` replaces the ingestion step by another named one that lands a raw batch (the
    error replay, ``replay/``); the steps after it are the same. A failure is recorded, then
    raised; with ``raise_failure`` false it is returned as the result (outcome ``failed``,
    ``error`` saying why) so that the caller can go on. With ``inline_services`` false the
    table services due after the merge are left to the caller (the continuous runner runs them
    apart from the batch: ``result.merged`` says after which batches). ``defer`` takes the
    fork's Data Docs page to build off the batch's path (the runner's services thread); without
    it the page is built before the run is recorded.

    A job whose Hudi lake exists takes the batch path (steps/batch.py: converter and fork in
    one pass, no step tables, no dbt invocation); the others, and jobs with
    ``keep_step_tables``, the step tables' path (staging, fork, merge through dbt).

    The run works on the session that writes the job's table format (``for_job``), active
    on this thread while it runs (dbt in-process takes the thread's session)."""
    run = Run(job=job.name)
    # its Spark jobs in a job group of its own: its cost is their task time (runtime/cost.py)
    with active(for_job(spark, settings, job)) as session, \
            metered(session, run.run_id, f"sluice job {job.name}") as meter:
        return _run_job(session, settings, job, accept_data_loss, dbt, raise_failure, land,
                        inline_services, defer, run, meter)


def _run_job(spark: SparkSession, settings: Settings, job: JobConfig, accept_data_loss: bool,
             dbt: Dbt | None, raise_failure: bool, land: tuple[str, Lander] | None,
             inline_services: bool, defer: Callable[[DocsJob], None] | None, run: Run,
             meter: Meter) -> PipelineResult:
    first, lander = land or ("ingest", lambda run: ingest(spark, settings, job, run,
                                                          accept_data_loss).checkpoint)
    run.details["steps"] = [first, "staging", "fork", "merge", "reports",
                            *(["disperse"] if job.dispersal else [])]
    for name in STEP_COUNTS:
        run.count(name, 0)
    dbt = dbt or Dbt(settings)
    checkpoint = None
    try:
        tables = JobTables(job.name, dbt.job_models(job.name))
        with job_lease(spark, job.name) as lease:  # one run of a job at a time (lease.py)
            if not lease.untouched:  # another process ran it since: the tables this one
                refresh_schemas(spark, tables.all())  # named before may have changed
            name_tables(spark, tables.all())  # another process's tables, before dbt lists them
            checkpoint = lander(run)
            fault_point(f"after_{first}")
            why = why_not(spark, job, tables, dbt)
            if why is None:
                report = run_batches(spark, dbt, job, tables, run,
                                     suite_path(dbt.project, tables.staging_model),
                                     expectation_pages(settings, job.name), dbt.batch_sql,
                                     defer)
            else:
                log.debug("job %s takes the step tables' path: %s", job.name, why)
                run.details["path"] = "step tables"
                _staging(spark, dbt, tables, run)
                fault_point("after_staging")
                report = fork_staged(spark, settings, dbt.project, tables, run, defer)
                fault_point("after_fork")
                _merge(spark, dbt, tables, run)
                history_writer.catch_up(spark, dbt, tables)  # without history: nothing
            fault_point("after_merge")
            if inline_services:
                _services(spark, job, tables, run)
            _disperse(spark, settings, job, tables, run)
    except Exception as exc:
        run.outcome, run.error = "failed", f"{type(exc).__name__}: {exc}"
        run.cost = meter.cost()
        record_status(spark, settings, run, checkpoint, None)
        run.finish(spark, "failed", run.error)
        if not isinstance(exc, SluiceError):
            log.exception("job %s failed", job.name)
        if raise_failure:
            raise
        log.error("job %s failed (the other jobs go on): %s", job.name, run.error)
        return PipelineResult(job.name, run.run_id, "failed", run.batch_id, dict(run.counts),
                              checkpoint=checkpoint, error=run.error)
    outcome = "up-to-date" if not any(run.counts.get(n) for n in STEP_COUNTS) else "succeeded"
    run.outcome = outcome  # the status file first: `sluice status` shows the batch at once
    run.cost = meter.cost()
    record_status(spark, settings, run, checkpoint, tables)
    run.finish(spark, outcome)
    return PipelineResult(job.name, run.run_id, outcome, run.batch_id, dict(run.counts),
                          report, tables, checkpoint, merged=merged_batches(run))


def record_status(spark: SparkSession, settings: Settings, run: Run,
                   checkpoint: Checkpoint | None, tables: JobTables | None) -> None:
    """The job's entry in the status file (tables/status.py); never fails the run."""
    try:
        newest = None
        # the batch this run finished: its own, or the raw batch later steps caught up on
        batch_id = run.batch_id or (checkpoint.batch_id if checkpoint else None)
        landed_ms = run.details.get("newest_ms")
        if landed_ms and run.batch_id and batch_id == run.batch_id:  # ingest said (no scan)
            newest = datetime.fromtimestamp(int(landed_ms) / 1000, UTC).isoformat()
        elif tables is not None and run.outcome == "succeeded" and batch_id:
            value = spark.sql(f"select max(_kafka_timestamp) from {tables.raw} "
                              f"where _batch_id = {int(batch_id)}").collect()[0][0]
            newest = value.replace(tzinfo=UTC).isoformat() if value is not None else None
        cores = spark.sparkContext.defaultParallelism
        StatusFile(settings.path(settings.state_dir)).record_run(
            run.job, run.run_id, run.outcome, run.counts, run.duration_s,
            run.duration_s * cores, batch_id,
            None if checkpoint is None else json.loads(checkpoint.to_json()), newest, run.error,
            cost=run.cost)
    except Exception:  # bookkeeping must not turn a good run into a failed one
        log.exception("could not update the status file for job %s", run.job)


def _staging(spark: SparkSession, dbt: Dbt, tables: JobTables, run: Run) -> None:
    """Run the converter when raw holds batches staging does not (one dbt run)."""
    raw = read_checkpoint(spark, tables.raw)
    raw_batch = raw.batch_id if raw else 0
    staged = _max_batch(spark, tables.staging)
    run.details["staging"] = {"raw_batch": raw_batch, "staged_before": staged}
    if raw_batch <= staged:
        return
    check_held(tables.job)
    # on this thread: its Spark jobs stay in the job's FAIR pool (a dbt worker thread has none)
    dbt.run(tables.staging_model, single_threaded=True)
    run.details["staging"]["staged_after"] = _max_batch(spark, tables.staging)


def _max_batch(spark: SparkSession, table: str) -> int:
    if not table_exists(spark, table):
        return 0
    value = spark.sql(f"select max(_batch_id) from {table}").collect()[0][0]
    return int(value) if value is not None else 0


def fork_staged(spark: SparkSession, settings: Settings, project: Path, tables: JobTables,
                run: Run, defer: Callable[[DocsJob], None] | None = None) -> str | None:
    """The fork of every staged batch the valid table lacks (steps/fork/split.py); counts to
    ``run``; returns the expectation report's path (None when there is no staging table)."""
    if not table_exists(spark, tables.staging):
        return None
    suite = suite_path(project, tables.staging_model)  # the suites beside dbt's project
    check_held(tables.job)
    result = fork(spark, tables.staging, tables.valid, tables.errors, suite,
                  expectation_pages(settings, tables.job), defer)
    run.count("valid", result.valid)
    run.count("expectation_errors", result.errors)
    run.details["fork"] = {"batches": [result.batch_from + 1, result.batch_to],
                           "rows": result.rows, "quality": result.quality,
                           "report": result.report}
    return result.report


def _merge(spark: SparkSession, dbt: Dbt, tables: JobTables, run: Run) -> None:
    """Merge each forked batch the lake table has not merged, one dbt run per batch."""
    if tables.lake is None:
        log.warning("job %s has no lake model (materialized lake_merge) on %s: not merged",
                    tables.job, tables.staging_model)
        return
    totals = {"inserted": 0, "updated": 0, "deleted": 0, "merge_errors": 0}
    merged = []
    for batch_id, skip in pending_merges(spark, tables):
        counts = _merge_batch(spark, dbt, tables, batch_id, skip)
        merged.append({"batch_id": batch_id, "skipped": skip, **counts})
        if "lake" not in skip:
            for name in totals:
                totals[name] += counts[name]
    for name, value in totals.items():
        run.count(name, value)
    run.details["merge"] = merged


def merged_batches(run: Run) -> list[int]:
    """The batches ``run`` merged into the lake table."""
    return [m["batch_id"] for m in run.details.get("merge", []) if "lake" not in m["skipped"]]


def _services(spark: SparkSession, job: JobConfig, tables: JobTables, run: Run) -> None:
    """The table services due after this run's merges (steps/services.py), in its record."""
    merged = merged_batches(run)
    if not merged:
        return
    check_held(tables.job)
    done = due_services(spark, job, tables, merged)
    if done:
        run.details["services"] = done


def _disperse(spark: SparkSession, settings: Settings, job: JobConfig, tables: JobTables,
              run: Run) -> None:
    """The job's dispersal targets brought to the lake's position (docs/dispersal.md); a
    failure fails the run, and the target's position stays for the next run to retry."""
    if not job.dispersal:
        return
    from python_ingest.sinks import disperse_all

    check_held(tables.job)
    index_cache.complete(spark, tables)  # the deletes since a target's position: in the index
    results = disperse_all(spark, settings, job, tables)
    run.count("dispersed_upserted", sum(r.upserted for r in results))
    run.count("dispersed_deleted", sum(r.deleted for r in results))
    run.details["dispersal"] = [r.as_details() for r in results]


def pending_merges(spark: SparkSession, tables: JobTables) -> list[tuple[int, list[str]]]:
    """The forked batches the merge has yet to apply, oldest first, each with the targets an
    earlier, interrupted merge of it already committed (errors, index, lake)."""
    if tables.lake is None or not table_exists(spark, tables.valid):
        return []
    ensure_table(spark, tables.errors, ERROR_COLUMNS)
    ensure_index(spark, tables)
    index_cache.complete(spark, tables)  # the lake model reads the index: every entry in it
    lake_done, index_done, errors_done = merge_progress(spark, tables)
    start = min(lake_done, index_done)
    found = [int(r[0]) for r in spark.sql(
        f"select distinct _batch_id from {tables.valid} where _batch_id > {start} "
        "order by _batch_id").collect()]
    pending = []
    for batch_id in found:
        skip = [name for name, done in (("errors", errors_done), ("lake", lake_done),
                                        ("index", index_done)) if done >= batch_id]
        if len(skip) < 3:
            pending.append((batch_id, skip))
    return pending


def merge_progress(spark: SparkSession, tables: JobTables) -> tuple[int, int, int]:
    """The last batch the merge committed to the lake, index and error tables. The error and
    index inserts come before the lake's MERGE and are left out when they have no rows, so a
    lake checkpoint at or past a batch covers them (sluice_apply_change_set.sql)."""
    lake_done = step_checkpoint(spark, tables.lake or "", MERGE_STEP)
    return (lake_done,
            max(step_checkpoint(spark, tables.index, MERGE_STEP), lake_done),
            max(step_checkpoint(spark, tables.errors, MERGE_STEP), lake_done))


def _merge_batch(spark: SparkSession, dbt: Dbt, tables: JobTables, batch_id: int,
                 skip: list[str]) -> dict[str, int]:
    """One dbt run of the lake model for one batch, committing the merge checkpoint."""
    lake_model = tables.models.lake if tables.models else None
    changes = tables.merge_changes
    assert lake_model is not None and changes is not None
    variables = {"sluice_batch_id": batch_id, "sluice_skip": skip, **tables.dbt_vars()}
    check_held(tables.job)
    drop_scratch(spark, changes)  # an earlier process's, if it is still there
    with insert_operation_kept(spark):
        committing(spark, step_properties(MERGE_STEP, batch_id),
                   lambda: dbt.run(lake_model, variables, single_threaded=True))
    return merged_counts(spark, tables, batch_id, skip)


def merged_counts(spark: SparkSession, tables: JobTables, batch_id: int,
                  skip: list[str]) -> dict[str, int]:
    """What the merge of ``batch_id`` did, from its change set (then dropped); raises when
    the lake's commit lacks the batch's checkpoint."""
    changes = tables.merge_changes
    assert changes is not None
    actions: dict[str, int] = dict(
        spark.sql(f"select _merge_action, count(*) from {changes} group by 1").collect())
    rejected = spark.sql(f"select coalesce(sum(size(_rejected)), 0) from {changes}"
                         ).collect()[0][0]
    drop_scratch(spark, changes)
    if step_checkpoint(spark, tables.lake or "", MERGE_STEP) < batch_id:
        raise PipelineError(f"the merge of batch {batch_id} into {tables.lake} committed "
                            "without its checkpoint; nothing after it was merged")
    counts = {"inserted": int(actions.get("insert", 0)), "updated": int(actions.get("update", 0)),
              "deleted": int(actions.get("delete", 0)),
              "merge_errors": int(rejected) if "errors" not in skip else 0}
    log.info("merged batch %d into %s: %s", batch_id, tables.lake, counts)
    return counts


def run_all(spark: SparkSession, settings: Settings, names: list[str],
            accept_data_loss: bool = False, keep_going: bool = False,
            max_parallel: int | None = None) -> list[PipelineResult]:
    """Run several jobs once each with one dbt project parse, ``max_parallel`` at once
    (default ``runner.max_parallel_jobs``), higher ``priority`` first, each on a session of
    its own in its FAIR pool (as the continuous runner runs them). ``keep_going``: a job that
    fails is recorded and the other jobs still run (``sluice run --all``): one broken job
    never stops the others. Results in the order of ``names``; run records are written
    together when the last job ends (one commit to the shared meta.runs)."""
    dbt = Dbt(settings)
    parallel = max(1, min(max_parallel or settings.runner.max_parallel_jobs, len(names)))
    if parallel == 1:
        return [run_job(spark, settings, settings.job(n), accept_data_loss, dbt,
                        raise_failure=not keep_going) for n in names]
    from concurrent.futures import ThreadPoolExecutor

    from python_ingest.runtime.session import POOL_PREFIX, activate, job_session
    from python_ingest.tables.runs import records_deferred

    dbt.prepare(names)  # saved or parsed once, before the threads
    order = sorted(names, key=lambda n: (-settings.job(n).priority, n))
    sessions = {n: job_session(spark, settings, settings.job(n)) for n in order}

    def one(name: str) -> PipelineResult:
        session = sessions[name]
        activate(session)
        session.sparkContext.setLocalProperty("spark.scheduler.pool", f"{POOL_PREFIX}{name}")
        return run_job(session, settings, settings.job(name), accept_data_loss, dbt,
                       raise_failure=not keep_going)

    log.info("running %d jobs, %d at once", len(names), parallel)
    with records_deferred(spark), ThreadPoolExecutor(parallel,
                                                     thread_name_prefix="sluice-job") as pool:
        futures = {n: pool.submit(one, n) for n in order}
        return [futures[n].result() for n in names]


def table_summary(spark: SparkSession, tables: JobTables) -> dict[str, Any]:
    """Row counts of a job's tables, for the CLI's summary."""
    summary: dict[str, Any] = {}
    for name in tables.all():
        if table_exists(spark, name):
            summary[name] = spark.table(name).count()
    return summary
