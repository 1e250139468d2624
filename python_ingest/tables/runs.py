"""Job bookkeeping: one row per run in ``meta.runs``, whatever its outcome.

Counts are a map so each step (ingest, staging, fork, merge) adds its own figures without a
schema change; ``details`` holds JSON for what does not fit a count (work units, data loss,
quality figures, report paths).

A run's cost: a metered run (``runtime.cost``) has its executor seconds in ``core_seconds``
(the core-seconds its Spark tasks held) and ``details.cost`` (``executor_s``, ``cpu_s``,
``jobs``, ``stages``); a run without a cost keeps the old estimate, wall time × the driver's
cores, and no ``details.cost``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from python_ingest.runtime.cost import Cost
from python_ingest.runtime.session import active, project_session
from python_ingest.tables.formats import append, ensure_table, table_exists
from python_ingest.tables.names import RUNS_TABLE

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

WRITE_ATTEMPTS = 3  # a record's commit to meta.runs, tried this often, RETRY_S × n apart
RETRY_S = 1.0
HELD_MAX = 10_000  # deferred records kept for a later flush when meta.runs cannot be written
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
    cost: Cost | None = None  # its Spark tasks' time (runtime.cost), when metered
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
        if self.cost is None:  # not metered: the old estimate
            core_seconds = duration * spark.sparkContext.defaultParallelism
        else:
            core_seconds = self.cost.executor_s
            self.details["cost"] = {**self.cost.as_dict(), "jobs": self.cost.jobs,
                                    "stages": self.cost.stages}
        row = (self.run_id, self.job, self.batch_id, self.started_at, finished, duration,
               core_seconds, outcome, error, self.counts, json.dumps(self.details, default=str))
        deferred = _deferred
        if deferred is not None and deferred.add(row, spark):
            return
        _write(spark, [row])


def _write(spark: SparkSession, rows: list[tuple[Any, ...]]) -> bool:
    """Append run records to meta.runs in one commit, tried ``WRITE_ATTEMPTS`` times (another
    process's commit to the shared table can fail this one: two runners stopping at once on
    an object store did); whether they landed. Failures are logged, never raised. meta.runs is
    in the project's table format whatever the job's (``project_session``)."""
    for attempt in range(1, WRITE_ATTEMPTS + 1):
        try:
            with active(project_session(spark)) as session:
                ensure_table(session, RUNS_TABLE, RUNS_COLUMNS)
                ddl = ", ".join(f"`{n}` {t}" for n, t in RUNS_COLUMNS)
                append(session.createDataFrame(rows, ddl), RUNS_TABLE)
            return True
        except Exception:  # the runs' own outcomes matter more than their records
            what = ", ".join(f"{r[1]}/{r[0]}" for r in rows)
            if attempt < WRITE_ATTEMPTS:
                log.warning("could not record %d run(s) in %s (attempt %d of %d, again in "
                            "%.0f s): %s", len(rows), RUNS_TABLE, attempt, WRITE_ATTEMPTS,
                            RETRY_S * attempt, what, exc_info=True)
                time.sleep(RETRY_S * attempt)
            else:
                log.exception("could not record %d run(s) in %s: %s", len(rows), RUNS_TABLE,
                              what)
    return False


class _Deferred:
    """Run records held back and written together, one commit per flush."""

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self.lock = threading.Lock()
        self.spark: SparkSession | None = None  # of the newest record: flushes without one
        self.closed = False  # its block ended: a record added now is written at once

    def add(self, row: tuple[Any, ...], spark: SparkSession | None = None) -> bool:
        """Hold ``row``; False when this holder's block has ended (blocks of threads that
        outlive each other may leave an ended one current: its records are not swallowed)."""
        with self.lock:
            if self.closed:
                return False
            self.rows.append(row)
            self.spark = spark or self.spark
            return True

    def flush(self, spark: SparkSession) -> None:
        """Write the held records; those that could not be written are held for the next
        flush (the newest ``HELD_MAX``: a table that stays unwritable does not grow memory)."""
        with self.lock:
            rows, self.rows = self.rows, []
        if rows and not _write(spark, rows):
            with self.lock:
                self.rows = (rows + self.rows)[-HELD_MAX:]


_deferred: _Deferred | None = None


@contextmanager
def _current() -> Iterator[_Deferred]:
    """A new holder, current while the block runs; afterwards closed, and the one before it
    current again unless another block took over meanwhile (blocks of threads that outlive
    each other end in any order)."""
    global _deferred
    previous, holder = _deferred, _Deferred()
    _deferred = holder
    try:
        yield holder
    finally:
        if _deferred is holder:
            _deferred = previous
        with holder.lock:
            holder.closed = True


@contextmanager
def records_deferred(spark: SparkSession, every_s: float = 30.0) -> Iterator[None]:
    """While the block runs (a long-running runner), run records are written every
    ``every_s`` seconds, all of them in one commit, and when the block ends: the commit to the
    shared meta.runs (optimistic concurrency, about 1.4 s) leaves each batch's path. A process
    killed meanwhile loses the records of its last ``every_s`` seconds, never data: the status
    file (tables/status.py) has each job's last run at once, and checkpoints are in the data's
    commits. Records whose write fails (after ``_write``'s attempts: another runner's commit to
    meta.runs, an object store away) are held and written by the next flush."""
    stop = threading.Event()
    try:
        with _current() as deferred:

            def loop() -> None:
                while not stop.wait(every_s):
                    deferred.flush(spark)

            writer = threading.Thread(target=loop, name="sluice-runs", daemon=True)
            writer.start()
            try:
                yield
            finally:
                stop.set()
                writer.join()
    finally:  # after the block's end: a record added since is written at once
        deferred.flush(spark)


@contextmanager
def records_held() -> Iterator[None]:
    """While the block runs, run records are held in memory (no writer thread) and written
    in one commit by ``flush_records`` (every reader of runs here calls it first) or when the
    block ends: a process that runs jobs one after another and reads their records later
    (a script, the test suite) pays one commit to meta.runs instead of one per run."""
    try:
        with _current() as held:
            yield
    finally:  # after the block's end: a record added since is written at once
        if held.spark is not None:
            held.flush(held.spark)


def flush_records(spark: SparkSession | None = None) -> None:
    """Write the records held back in this process now (``records_deferred``,
    ``records_held``), before something reads meta.runs."""
    deferred = _deferred
    if deferred is not None:
        session = spark or deferred.spark
        if session is not None:
            deferred.flush(session)


def last_runs(spark: SparkSession, job: str | None = None, limit: int = 10) -> list[dict[str, Any]]:
    """The newest runs, newest first (all jobs, or one)."""
    flush_records(spark)
    with active(project_session(spark)) as session:
        if not table_exists(session, RUNS_TABLE):
            return []
        df = session.table(RUNS_TABLE)
        if job:
            df = df.where(df.job == job)
        newest = df.orderBy(df.started_at.desc()).limit(limit).collect()
    return [r.asDict(recursive=True) for r in newest]
