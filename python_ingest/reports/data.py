"""What the dashboard shows, read from ``meta.runs``, the tables' commit metadata (Hudi's
timeline or Iceberg's snapshots), and Kafka or a files job's landing dir.

Per run: counts (``meta.runs``), cost (executor seconds, the time its Spark tasks ran, and
their CPU time: ``runtime.cost``; a run recorded before runs were metered has only wall time ×
cores), throughput, error rate, and three figures the runs do not record (yet) but that can be
computed from what exists:

* step durations: each step ends with a table commit (ingest: ``errors.<job>__raw``, staging:
  ``staging.<model>``, fork: ``staging.<model>__valid``, merge: the lake, error and index
  tables), so the commits made inside a run's time window mark where its steps ended;
  a step that committed nothing adds its time to the next step that did, and what follows the
  last commit (reports, bookkeeping, table services) is "services". A run whose details hold
  ``durations`` (seconds per step) is shown as recorded.
* backlog after the run: Kafka's offset of the first message produced after the run finished
  (``offsets_for_times``) minus the run's checkpoint, summed over partitions; a files job's:
  the ready partitions its run left for later (beyond its caps, leased, or changed while read).
* freshness: how old the newest landed message (its Kafka timestamp) was when the run finished;
  the newest timestamp per batch comes from the raw table's file metrics, not a data scan.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from python_ingest.config import JobConfig, Settings
from python_ingest.exceptions import SluiceError
from python_ingest.kafka import client as kafka_client
from python_ingest.runtime.session import active, for_job, project_session
from python_ingest.steps.dbt import Dbt
from python_ingest.steps.services import MAINTAIN_FAILED, MAINTAINED
from python_ingest.tables.checkpoints import ProcessedPartitions, read_checkpoint
from python_ingest.tables.formats import commit_times, name_tables, table_exists
from python_ingest.tables.names import RUNS_TABLE, JobTables
from python_ingest.tables.runs import flush_records

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

STEPS = ("ingest", "staging", "fork", "merge", "services")
ERROR_COUNTS = ("decode_errors", "expectation_errors", "merge_errors")
MERGED_COUNTS = ("inserted", "updated", "deleted")


@dataclass
class RunPoint:
    """One run of a job, as the dashboard plots it."""

    run_id: str
    started_at: datetime
    finished_at: datetime
    duration_s: float
    core_seconds: float
    outcome: str
    error: str | None
    batch_id: int | None
    counts: dict[str, int]
    details: dict[str, Any]
    steps: dict[str, float] = field(default_factory=dict)
    backlog: int | None = None
    freshness_s: float | None = None
    executor_s: float | None = None  # its cost when metered (core_seconds is then the same)
    cpu_s: float | None = None

    @property
    def read(self) -> int:
        return int(self.counts.get("read", 0))

    @property
    def valid(self) -> int:
        return int(self.counts.get("valid", 0))

    @property
    def errors(self) -> int:
        return sum(int(self.counts.get(n, 0)) for n in ERROR_COUNTS)

    @property
    def merged(self) -> int:
        return sum(int(self.counts.get(n, 0)) for n in MERGED_COUNTS)

    @property
    def error_rate(self) -> float | None:
        return self.errors / self.read if self.read else None

    @property
    def throughput(self) -> float:
        return self.read / self.duration_s if self.duration_s > 0 else 0.0


@dataclass
class JobReport:
    """One job: its recent runs (oldest first) and where it stands now."""

    name: str
    topic: str
    tables: JobTables
    runs: list[RunPoint]
    backlog: int | None = None
    backlog_error: str | None = None
    newest_data: datetime | None = None
    error_rows: int = 0
    raw_error_rows: int = 0
    source: str = "kafka"  # or "files": its backlog counts partitions, not messages
    late_partitions: int = 0  # a files job's late partitions skipped so far

    @property
    def files(self) -> bool:
        return self.source == "files"

    @property
    def last(self) -> RunPoint | None:
        return self.runs[-1] if self.runs else None


def collect(spark: SparkSession, settings: Settings, names: list[str], runs: int = 50,
            tables: dict[str, JobTables] | None = None) -> list[JobReport]:
    """The dashboard's figures for ``names`` (jobs of the config), ``runs`` runs each.

    ``tables``: the jobs' tables when known (a pipeline run has them); the others are found
    with a dbt parse of the project.
    """
    recent = _recent_runs(spark, names, runs)
    known = dict(tables or {})
    dbt: Dbt | None = None
    reports = []
    for name in names:
        job = settings.job(name)
        if name not in known:
            try:
                dbt = dbt or Dbt(settings)
                known[name] = JobTables(name, dbt.job_models(name))
            except SluiceError as exc:  # no converter yet: the ingest figures still show
                log.info("job %s: no dbt models (%s)", name, exc)
                known[name] = JobTables(name)
        report = JobReport(name, job.files.path if job.files else job.topic, known[name],
                           recent.get(name, []), source=job.source)
        with active(for_job(spark, settings, job)) as session:
            _fill(session, settings, job, report)
        reports.append(report)
    return reports


def _recent_runs(spark: SparkSession, names: list[str], limit: int) -> dict[str, list[RunPoint]]:
    flush_records(spark)  # those this process holds back
    with active(project_session(spark)) as session:
        return _runs_of(session, names, limit)


def _runs_of(spark: SparkSession, names: list[str], limit: int) -> dict[str, list[RunPoint]]:
    if not names or not table_exists(spark, RUNS_TABLE):
        return {}
    wanted = ", ".join(f"'{n}'" for n in names)
    # batches only: a run of table services alone moves no rows
    rows = spark.sql(
        f"select * from (select *, row_number() over (partition by job order by started_at "
        f"desc) as n from {RUNS_TABLE} where job in ({wanted}) "
        f"and outcome not in ('{MAINTAINED}', '{MAINTAIN_FAILED}')) where n <= {int(limit)} "
        "order by job, started_at").collect()
    runs: dict[str, list[RunPoint]] = {}
    for r in rows:
        try:
            details = json.loads(r["details"] or "{}")
        except ValueError:
            details = {}
        cost = details.get("cost") if isinstance(details.get("cost"), dict) else {}
        runs.setdefault(r["job"], []).append(RunPoint(
            r["run_id"], r["started_at"], r["finished_at"], float(r["duration_s"] or 0),
            float(r["core_seconds"] or 0), r["outcome"], r["error"], r["batch_id"],
            dict(r["counts"] or {}), details, executor_s=_seconds(cost.get("executor_s")),
            cpu_s=_seconds(cost.get("cpu_s"))))
    return runs


def _seconds(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


def _fill(spark: SparkSession, settings: Settings, job: JobConfig, report: JobReport) -> None:
    """Step durations, backlog and freshness per run, and the job's state now."""
    tables = report.tables
    name_tables(spark, tables.all())
    _step_durations(spark, tables, report.runs)
    newest = _newest_per_batch(spark, tables.raw)
    report.newest_data = max(newest.values()) if newest else None
    newest_so_far: datetime | None = None
    for run in report.runs:  # oldest first: freshness as of each run's end
        landed = [ts for batch, ts in newest.items() if run.batch_id is None
                  or batch <= run.batch_id]
        if run.batch_id is None:  # up to date or failed before ingest: what had landed then
            landed = [ts for batch, ts in newest.items() if ts <= run.finished_at] or landed
        newest_so_far = max(landed) if landed else newest_so_far
        if newest_so_far is not None:
            run.freshness_s = max(0.0, (run.finished_at - newest_so_far).total_seconds())
    if job.files is not None:  # a files job: its ready partitions not processed yet
        from python_ingest.sources.files.partitions import ready_backlog

        checkpoint = read_checkpoint(spark, tables.raw)
        processed = checkpoint.files if checkpoint and checkpoint.files else ProcessedPartitions()
        report.backlog = ready_backlog(job.files, processed)
        _files_per_run(report, processed)
    else:
        _kafka_backlog(spark, settings, job, report)
    for name, attr in ((tables.errors if tables.models else None, "error_rows"),
                       (tables.raw_errors, "raw_error_rows")):
        if name and table_exists(spark, name):
            setattr(report, attr, int(spark.table(name).count()))


def _files_per_run(report: JobReport, processed: ProcessedPartitions) -> None:
    """A files job's backlog per run (the ready partitions it left) and its late partitions
    skipped so far: the newest run's count (an up-to-date run counts what it found without a
    commit) or the checkpoint's, whichever is larger."""
    late = len(processed.late)
    for run in report.runs:
        if "partitions_left" in run.details:
            run.backlog = len(run.details["partitions_left"]) + len(
                run.details.get("partitions_changed_while_read") or [])
        if "late_partitions" in run.counts:
            late = int(run.counts["late_partitions"])
    report.late_partitions = max(late, len(processed.late))


def _kafka_backlog(spark: SparkSession, settings: Settings, job: JobConfig,
                   report: JobReport) -> None:
    """A Kafka job's messages past its checkpoint now, and per run (the plot's line)."""
    tables = report.tables
    try:
        offsets = kafka_client.partition_offsets(settings.kafka_for(job), job.topic)
        checkpoint = read_checkpoint(spark, tables.raw)
        done = checkpoint.offsets if checkpoint else {}
        report.backlog = sum(max(0, p.end - done.get(p.partition, p.earliest)) for p in offsets)
    except SluiceError as exc:
        report.backlog_error = str(exc)
    else:
        try:
            _backlog_per_run(settings.kafka_for(job), job.topic, report.runs,
                             {p.partition: p.end for p in offsets})
        except Exception as exc:  # kafka-python's own errors: the plot only lacks the line
            log.warning("job %s: no backlog per run (%s)", job.name, exc)


def _commit_times(spark: SparkSession, table: str | None) -> list[datetime]:
    if not table or not table_exists(spark, table):
        return []
    return commit_times(spark, table)


def _step_durations(spark: SparkSession, tables: JobTables, runs: list[RunPoint]) -> None:
    if not runs:
        return
    has_models = tables.models is not None
    ends = {
        "ingest": _commit_times(spark, tables.raw) + _commit_times(spark, tables.raw_errors),
        "staging": _commit_times(spark, tables.staging) if has_models else [],
        "fork": _commit_times(spark, tables.valid) if has_models else [],
        "merge": (_commit_times(spark, tables.lake) + _commit_times(spark, tables.index)
                  if has_models else []),
    }
    for run in runs:
        recorded = run.details.get("durations")
        if isinstance(recorded, dict):
            run.steps = {s: float(recorded.get(s) or 0) for s in STEPS}
            continue
        mark, steps = run.started_at, {}
        for step, times in ends.items():
            inside = [t for t in times if run.started_at <= t <= run.finished_at and t >= mark]
            steps[step] = (max(inside) - mark).total_seconds() if inside else 0.0
            mark = max(inside) if inside else mark
        steps["services"] = max(0.0, (run.finished_at - mark).total_seconds())
        run.steps = steps


def _newest_per_batch(spark: SparkSession, raw: str) -> dict[int, datetime]:
    """The newest Kafka timestamp per raw batch, from the data files' column metrics."""
    if not table_exists(spark, raw):
        return {}
    try:
        rows = spark.sql(
            "select readable_metrics._batch_id.upper_bound as batch, "
            "max(readable_metrics._kafka_timestamp.upper_bound) as newest "
            f"from {raw}.files group by 1").collect()
    except Exception as exc:  # no metrics (e.g. a metrics mode of none): scan the columns
        log.debug("no file metrics for %s (%s); scanning", raw, exc)
        rows = spark.sql(f"select _batch_id as batch, max(_kafka_timestamp) as newest from "
                         f"{raw} group by 1").collect()
    return {int(r["batch"]): r["newest"] for r in rows
            if r["batch"] is not None and r["newest"] is not None}


def _backlog_per_run(bootstrap: str, topic: str, runs: list[RunPoint],
                     ends: dict[int, int]) -> None:
    """Messages waiting in Kafka when each run finished (see the module doc)."""
    from kafka import KafkaConsumer, TopicPartition

    from python_ingest.kafka import security

    consumer = KafkaConsumer(**security.kafka_python(bootstrap, f"the dashboard (topic {topic})",
                                                     enable_auto_commit=False,
                                                     request_timeout_ms=30000))
    try:
        done: dict[int, int] = {}
        for run in runs:
            reached = run.details.get("checkpoint_to") or run.details.get("checkpoint_from")
            if isinstance(reached, dict):
                done.update({int(p): int(o) for p, o in reached.items()})
            if "backlog" in run.details:
                run.backlog = int(run.details["backlog"])
                continue
            if not done:
                continue
            at_ms = int(run.finished_at.timestamp() * 1000)
            found = consumer.offsets_for_times({TopicPartition(topic, p): at_ms for p in ends})
            run.backlog = sum(
                max(0, (found[tp].offset if found.get(tp) else ends[tp.partition])
                    - done.get(tp.partition, 0))
                for tp in found)
    finally:
        consumer.close()
