"""Table services of a job's tables, by hand (``sluice maintain``).

Hudi: compaction of the merge-on-read lake table, cleaning and archival of every table;
Iceberg: the lake table's position delete files rewritten (docs/formats.md). The lake tables
also compact inline every 5 delta commits on Hudi (macros/sluice_lake_properties.sql).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from python_ingest.config import JobConfig
from python_ingest.steps.dbt import Dbt
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
    done = {}
    with job_lease(spark, job.name):
        for table in tables.all():
            if table_exists(spark, table):
                done[table] = maintain(spark, table, merged=table == tables.lake)
                log.info("maintained %s: %s", table, "; ".join(done[table]))
    return done
