"""Job bookkeeping: one row per run in ``meta.runs``, whatever its outcome.

Counts are a map so each step (ingest, staging, fork, merge) adds its own figures without a
schema change; ``details`` holds JSON for what does not fit a count (work units, data loss,
quality figures, report paths).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from python_ingest.tables.formats import append, ensure_table, table_exists
from python_ingest.tables.names import RUNS_TABLE

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

RUNS_COLUMNS = (
    ("run_id", "string"),
    ("job", "string"),
    ("batch_id", "bigint"),
    ("started_at", "timestamp"),
    ("finished_at", "timestamp"),
    ("duration_s", "double"),
    ("core_seconds", "double"),
    ("outcome", "string"),
    ("error", "string"),
    ("counts", "map<string,bigint>"),
    ("details", "string"),
)


@dataclass
class Run:
    """A run in progress; ``finish`` writes it to meta.runs."""

    job: str
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    batch_id: int | None = None
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    counts: dict[str, int] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    outcome: str = "running"
    error: str | None = None
    _t0: float = field(default_factory=time.monotonic)

    @property
    def duration_s(self) -> float:
        return time.monotonic() - self._t0

    def count(self, name: str, value: int) -> None:
        self.counts[name] = int(value)

    def finish(self, spark: SparkSession, outcome: str, error: str | None = None) -> None:
        """Record the run's outcome; bookkeeping failures are logged, never raised."""
        self.outcome, self.error = outcome, error
        finished = datetime.now(UTC)
        duration = self.duration_s
        cores = spark.sparkContext.defaultParallelism
        row = (self.run_id, self.job, self.batch_id, self.started_at, finished, duration,
               duration * cores, outcome, error, self.counts, json.dumps(self.details, default=str))
        try:
            ensure_table(spark, RUNS_TABLE, RUNS_COLUMNS)
            ddl = ", ".join(f"`{n}` {t}" for n, t in RUNS_COLUMNS)
            append(spark.createDataFrame([row], ddl), RUNS_TABLE)
        except Exception:  # the run's own outcome matters more than its record
            log.exception("could not record run %s of job %s", self.run_id, self.job)


def last_runs(spark: SparkSession, job: str | None = None, limit: int = 10) -> list[dict[str, Any]]:
    """The newest runs, newest first (all jobs, or one)."""

    if not table_exists(spark, RUNS_TABLE):
        return []
    df = spark.table(RUNS_TABLE)
    if job:
        df = df.where(df.job == job)
    newest = df.orderBy(df.started_at.desc()).limit(limit).collect()
    return [r.asDict(recursive=True) for r in newest]
