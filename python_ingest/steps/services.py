"""Table services of a job's tables: by hand (``sluice maintain``) and inline after a merge
when due (docs/index.md, "Services").

Hudi: compaction of the merge-on-read lake table (and of its metadata table, where the
record-level index lives), cleaning and archival of every table; Iceberg: the lake table's
position delete files rewritten (docs/formats.md). Both: the global index compacted to one
entry per key, delete markers older than the job's ``tombstone_retention`` dropped
(steps/index.py). Inline, after a run's merges: the lake's services after every
``services.compact_every``-th batch, the index's after every ``index_compact_every``-th.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from python_ingest.config import JobConfig
from python_ingest.steps.dbt import Dbt
from python_ingest.steps.index import compact_index
from python_ingest.tables.formats import maintain, table_exists
from python_ingest.tables.lease import job_lease
from python_ingest.tables.names import JobTables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def maintain_job(spark: SparkSession, dbt: Dbt, job: JobConfig) -> dict[str, list[str]]:
    """Run the services on every existing table of ``job``; what was done per table.

    Under the job's lease: a job's tables have one writer at a time (Hudi: single-writer
    settings, runtime/catalog.py), and compaction or cleaning is a write."""
    tables = JobTables(job.name, dbt.job_models(job.name))
    done: dict[str, list[str]] = {}
    with job_lease(spark, job.name):
        for table in tables.all():
            if not table_exists(spark, table):
                continue
            done[table] = []
            if table == tables.index:
                before, after = compact_index(spark, tables, job.services.tombstone_retention_s)
                done[table].append(f"compacted {before} entries to {after}")
            done[table] += maintain(spark, table, merged=table == tables.lake,
                                    keep_commits=job.services.keep_commits)
            log.info("maintained %s: %s", table, "; ".join(done[table]))
    return done


def due_services(spark: SparkSession, job: JobConfig, tables: JobTables,
                 merged: list[int]) -> list[dict[str, Any]]:
    """The services due after a run merged the batches ``merged`` (under the run's lease):
    the lake's (compaction, cleaning) after every ``compact_every``-th batch, the index
    compaction after every ``index_compact_every``-th. What ran, for the run's record
    (meta.runs details.services)."""
    done: list[dict[str, Any]] = []
    if _due(job.services.index_compact_every, merged):
        start = time.monotonic()
        before, after = compact_index(spark, tables, job.services.tombstone_retention_s)
        done.append({"service": "compact_index", "table": tables.index,
                     "entries_before": before, "entries_after": after,
                     "duration_s": round(time.monotonic() - start, 3)})
    lake = tables.lake
    if lake and _due(job.services.compact_every, merged):
        start = time.monotonic()
        what = maintain(spark, lake, merged=True, keep_commits=job.services.keep_commits)
        done.append({"service": "compact", "table": lake, "done": what,
                     "duration_s": round(time.monotonic() - start, 3)})
    return done


def _due(every: int, merged: list[int]) -> bool:
    """Whether a service run every ``every`` batches (0: never) is due after ``merged``."""
    return every > 0 and any(batch % every == 0 for batch in merged)
