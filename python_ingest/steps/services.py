"""Table services of a job's tables: by hand (``sluice maintain``) and inline after a merge
when due (docs/index.md, "Services").

Hudi: compaction of the merge-on-read lake table, cleaning and archival of every table;
Iceberg: the lake table's position delete files rewritten (docs/formats.md). The lake tables
also compact inline every 5 delta commits on Hudi (macros/sluice_lake_properties.sql). Both:
the global index compacted to one entry per key, delete markers older than the job's
``tombstone_retention`` dropped (steps/index.py).
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
            done[table] += maintain(spark, table, merged=table == tables.lake)
            log.info("maintained %s: %s", table, "; ".join(done[table]))
    return done


def due_services(spark: SparkSession, job: JobConfig, tables: JobTables,
                 merged: list[int]) -> list[dict[str, Any]]:
    """The services due after a run merged the batches ``merged`` (under the run's lease):
    the index compaction after every ``index_compact_every``-th batch. What ran, for the
    run's record (meta.runs details.services)."""
    every = job.services.index_compact_every
    if not any(batch % every == 0 for batch in merged):
        return []
    start = time.monotonic()
    before, after = compact_index(spark, tables, job.services.tombstone_retention_s)
    return [{"service": "compact_index", "table": tables.index, "entries_before": before,
             "entries_after": after, "duration_s": round(time.monotonic() - start, 3)}]
