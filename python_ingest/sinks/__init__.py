"""Dispersal: a lake table's changes copied to online stores (issue #13 part 2; Marmaray's
sinks). ``postgres`` keeps a table equal to the lake, exactly once; ``kafka`` sends keyed
Avro changes to a topic, at least once. ``changes`` finds what changed since a target's
position; docs/dispersal.md has the whole story.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from python_ingest.config import JobConfig, Settings
from python_ingest.config.dispersal import KafkaTarget, PostgresTarget
from python_ingest.exceptions import ConfigError
from python_ingest.sinks.changes import Position, lake_position
from python_ingest.sinks.result import DispersalResult
from python_ingest.tables.names import JobTables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DispersalResult", "Position", "disperse", "disperse_all"]
log = logging.getLogger(__name__)


def disperse(spark: SparkSession, settings: Settings, job: JobConfig, tables: JobTables,
             name: str) -> DispersalResult | None:
    """Bring target ``name`` of ``job`` to where the lake table is now (None: the lake has
    no merged batch yet). Callers hold the job's lease, so no merge moves the lake meanwhile."""
    if name not in job.dispersal:
        known = ", ".join(sorted(job.dispersal)) or "none"
        raise ConfigError(f"jobs.{job.name}.dispersal", f"no dispersal target named '{name}'",
                          f"known targets: {known}")
    until = lake_position(spark, tables)
    if until is None:
        log.info("job %s: the lake table has no commit yet, nothing to disperse", job.name)
        return None
    target = job.dispersal[name]
    if isinstance(target, PostgresTarget):
        from python_ingest.sinks.postgres import disperse_postgres

        return disperse_postgres(spark, tables, target, until)
    assert isinstance(target, KafkaTarget)
    from python_ingest.sinks.kafka import disperse_kafka

    return disperse_kafka(spark, tables, target, until, settings.path(settings.state_dir),
                          target.bootstrap_servers or settings.kafka_for(job))


def disperse_all(spark: SparkSession, settings: Settings, job: JobConfig,
                 tables: JobTables) -> list[DispersalResult]:
    """Every dispersal target of ``job``, in name order; the first failure is raised (the
    targets before it keep their new position, the rest keep their old one)."""
    results = []
    for name in sorted(job.dispersal):
        result = disperse(spark, settings, job, tables, name)
        if result is not None:
            results.append(result)
    return results
