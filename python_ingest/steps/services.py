"""Table services of a job's tables: by hand (``sluice maintain``) and inline after a merge
when due (docs/index.md, "Services").

Hudi: compaction of the merge-on-read lake table, cleaning and archival of every table (the
metadata table, where the record-level index lives, compacts itself every 10 of the lake's
commits, Hudi's default); Iceberg: the lake's data files with many deleted rows and its
position delete files rewritten, every table's snapshots expired down to ``keep_commits``
(never one a checkpoint is read from), orphan files removed by ``sluice maintain`` only
(tables/iceberg.py; docs/formats.md). Both: the global index compacted to one
entry per key, delete markers older than the job's ``tombstone_retention`` dropped
(steps/merge/index.py); raw rows of merged batches older than ``raw_retention`` deleted
(``expire_raw``); the append-only step tables' small files (raw, staging, valid, errors:
a file or more per batch) rewritten into few, sorted by batch (``compact_files``). Inline,
after a run's merges: the lake's services after every ``services.compact_every``-th batch,
the index's and the raw expiry after every ``index_compact_every``-th, the step tables' files
after every ``steps_compact_every``-th.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from python_ingest.changelog.schema import REPLAY_COLUMN
from python_ingest.config import JobConfig
from python_ingest.steps.dbt import Dbt
from python_ingest.steps.merge.index import MERGE_STEP, compact_index
from python_ingest.tables.checkpoints import step_checkpoint
from python_ingest.tables.formats import compact_files, maintain, name_tables, table_exists
from python_ingest.tables.lease import job_lease
from python_ingest.tables.names import JobTables
from python_ingest.tables.runs import Run

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def maintain_job(spark: SparkSession, dbt: Dbt, job: JobConfig) -> dict[str, list[str]]:
    """Run the services on every existing table of ``job``; what was done per table.

    Under the job's lease: a job's tables have one writer at a time (Hudi: single-writer
    settings, runtime/catalog.py), and compaction or cleaning is a write."""
    tables = JobTables(job.name, dbt.job_models(job.name))
    name_tables(spark, tables.all())
    done: dict[str, list[str]] = {}
    step_tables = tables.step_tables()
    with job_lease(spark, job.name):
        for table in tables.all():
            if not table_exists(spark, table):
                continue
            done[table] = []
            if table == tables.index:
                before, after = compact_index(spark, tables, job.services.tombstone_retention_s)
                done[table].append(f"compacted {before} entries to {after}")
            if table == tables.raw:
                expired = expire_raw(spark, tables, job.services.raw_retention_s)
                done[table].append(f"expired {expired} raw row(s) of merged batches")
            if table in step_tables:
                before, after = compact_files(spark, table)
                done[table].append(f"rewrote {before} data file(s) into {after}"
                                   if after != before else f"{before} data file(s): kept")
            done[table] += maintain(spark, table, merged=table in (tables.lake, tables.history),
                                    keep_commits=job.services.keep_commits, orphans=True)
            log.info("maintained %s: %s", table, "; ".join(done[table]))
    return done


def due_services(spark: SparkSession, job: JobConfig, tables: JobTables,
                 merged: list[int]) -> list[dict[str, Any]]:
    """The services due after a run merged the batches ``merged`` (under the run's lease):
    the lake's (compaction, cleaning) after every ``compact_every``-th batch, the index
    compaction after every ``index_compact_every``-th, the step tables' small files after
    every ``steps_compact_every``-th. What ran, for the run's record (meta.runs
    details.services)."""
    done: list[dict[str, Any]] = []
    if _due(job.services.index_compact_every, merged):
        start = time.monotonic()
        before, after = compact_index(spark, tables, job.services.tombstone_retention_s)
        done.append({"service": "compact_index", "table": tables.index,
                     "entries_before": before, "entries_after": after,
                     "duration_s": round(time.monotonic() - start, 3)})
        start = time.monotonic()
        expired = expire_raw(spark, tables, job.services.raw_retention_s)
        done.append({"service": "expire_raw", "table": tables.raw, "rows_deleted": expired,
                     "duration_s": round(time.monotonic() - start, 3)})
    if _due(job.services.steps_compact_every, merged):
        for table in tables.step_tables():
            if not table_exists(spark, table):
                continue
            start = time.monotonic()
            before, after = compact_files(spark, table)
            done.append({"service": "compact_files", "table": table, "files_before": before,
                         "files_after": after, "duration_s": round(time.monotonic() - start, 3)})
    lake = tables.lake
    if lake and _due(job.services.compact_every, merged):
        start = time.monotonic()
        what = maintain(spark, lake, merged=True, keep_commits=job.services.keep_commits)
        done.append({"service": "compact", "table": lake, "done": what,
                     "duration_s": round(time.monotonic() - start, 3)})
        history = tables.history  # merge-on-read too: compacted with the lake
        if history and table_exists(spark, history):
            start = time.monotonic()
            what = maintain(spark, history, merged=True,
                            keep_commits=job.services.keep_commits)
            done.append({"service": "compact", "table": history, "done": what,
                         "duration_s": round(time.monotonic() - start, 3)})
    return done


def services_due(job: JobConfig, merged: list[int]) -> bool:
    """Whether any service is due after the batches ``merged`` (``due_services`` would run
    one)."""
    return (_due(job.services.index_compact_every, merged)
            or _due(job.services.compact_every, merged)
            or _due(job.services.steps_compact_every, merged))



MAINTAINED = "maintained"  # the outcome of a run of table services alone
MAINTAIN_FAILED = "maintain-failed"  # ... that failed (its error says why)


def record_services(spark: SparkSession, job: str, run: Run,
                    done: list[dict[str, Any]] | None, error: str | None = None) -> None:
    """Record services that ran apart from a batch (the continuous runner's, ``sluice
    maintain``'s) as a run of their own in meta.runs: outcome ``maintained`` (with ``error``:
    ``maintain-failed``), ``details.steps`` ``["services"]``, ``details.services`` what each
    did. Never raises (bookkeeping)."""
    run.details["steps"] = ["services"]
    run.details["services"] = done or []
    run.finish(spark, MAINTAIN_FAILED if error else MAINTAINED, error)


def maintained_as_details(done: dict[str, list[str]]) -> list[dict[str, Any]]:
    """``maintain_job``'s result in the shape of ``due_services``' (meta.runs details; the
    run's own duration is the whole maintenance's)."""
    return [{"service": "maintain", "table": table, "done": what} for table, what in done.items()]


def _due(every: int, merged: list[int]) -> bool:
    """Whether a service run every ``every`` batches (0: never) is due after ``merged``."""
    return every > 0 and any(batch % every == 0 for batch in merged)


def expire_raw(spark: SparkSession, tables: JobTables, retention_s: int | None,
               now: datetime | None = None) -> int:
    """Delete the raw rows of batches the lake has merged whose newest row was ingested more
    than ``retention_s`` ago (None: keep every row); how many were deleted.

    Kept whatever their age: rows of a batch that has rows in the job's error table (``sluice
    errors replay`` reads the raw rows behind them) and rows a replay landed (``_replay_of``
    says which error rows are resolved). The delete is a commit without a checkpoint: the
    ingest checkpoint stays in the commit that wrote it (read_checkpoint reads the newest
    commit that has one)."""
    raw, lake = tables.raw, tables.lake
    if retention_s is None or not lake or not table_exists(spark, raw):
        return 0
    merged = step_checkpoint(spark, lake, MERGE_STEP)
    cutoff = (now or datetime.now(UTC)) - timedelta(seconds=retention_s)
    old = {int(r[0]) for r in spark.sql(
        f"select _batch_id from {raw} where _batch_id <= {merged} group by _batch_id "
        f"having max(_ingested_at) < timestamp_seconds({int(cutoff.timestamp())})").collect()}
    if old and table_exists(spark, tables.errors):
        old -= {int(r[0]) for r in spark.sql(
            f"select distinct _batch_id from {tables.errors} where _batch_id <= {merged}"
        ).collect()}
    if not old:
        return 0
    where = f"({batch_ranges(sorted(old))})"
    if REPLAY_COLUMN in spark.table(raw).columns:
        where += f" and {REPLAY_COLUMN} is null"
    count = int(spark.sql(f"select count(*) from {raw} where {where}").collect()[0][0])
    if count:
        spark.sql(f"delete from {raw} where {where}")
        log.info("%s: expired %d raw row(s) of %d merged batch(es) ingested before %s",
                 raw, count, len(old), cutoff.isoformat(timespec="seconds"))
    return count


def batch_ranges(batches: list[int]) -> str:
    """A SQL condition on ``_batch_id`` for the sorted ``batches``, one range per run."""
    runs: list[tuple[int, int]] = []
    for batch in batches:
        if runs and batch == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], batch)
        else:
            runs.append((batch, batch))
    return " or ".join(f"_batch_id = {a}" if a == b else f"_batch_id between {a} and {b}"
                       for a, b in runs)
