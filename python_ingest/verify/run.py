"""One verify of a job: find its source table, compare, settle lag, record the result.

What differs by source kind (MariaDB/MySQL: verify/binlog.py, PostgreSQL: verify/postgres.py)
is the kind's verify part (verify/kinds.py), looked up in the registry (sources/tap/kinds.py)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from python_ingest.config import JobConfig, Settings, SourceConfig
from python_ingest.exceptions import SluiceError
from python_ingest.sources.tap import kinds
from python_ingest.sources.tap.jobs import job_name
from python_ingest.tables.runs import Run
from python_ingest.verify.compare import (
    Difference,
    LakeSide,
    SourceSide,
    Target,
    VerifyResult,
    bisect,
    diff_rows,
)
from python_ingest.verify.kinds import SourceVerify

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

RANGE_ROWS = 64
FANOUT = 64
SETTLE_S = 300.0  # at most this long re-checking differing keys
QUIET_S = 30.0  # a key differing this long with neither side changing is a difference
POLL_S = 2.0


def source_tables(source: SourceConfig) -> list[tuple[str, str]]:
    """The ``(db, table)`` (PostgreSQL: ``(schema, table)``) pairs a source's tap reads."""
    catalog = kinds.catalog(source)
    conn = catalog.connect(source)
    try:
        return list(catalog.tables(conn, source))
    finally:
        conn.close()


def verifier(source: SourceConfig) -> SourceVerify:
    """The verify part of ``source``'s kind (verify/kinds.py)."""
    part: SourceVerify = kinds.part(source, "verify")()
    return part


def fed_jobs(settings: Settings) -> set[str]:
    """The jobs a tapped table of the config's sources feeds (what verify can compare)."""
    return {job_name(db, table) for source in settings.sources.values()
            for db, table in source_tables(source)}


def find_source(settings: Settings, job: JobConfig) -> tuple[SourceConfig, str, str]:
    """The source and ``(db, table)`` a job is fed by; raises if it has none."""
    for source in settings.sources.values():
        for db, table in source_tables(source):
            if job_name(db, table) == job.name:
                return source, db, table
    raise SluiceError(f"job {job.name} is not fed by a MariaDB/MySQL or PostgreSQL source in "
                      f"the config (sources: {', '.join(sorted(settings.sources)) or 'none'}): "
                      "verify compares a lake table with the table its tap reads")


def verify(spark: SparkSession, settings: Settings, job: JobConfig, lake_table: str, *,
           range_rows: int = RANGE_ROWS, fanout: int = FANOUT, settle_s: float = SETTLE_S,
           quiet_s: float = QUIET_S,
           progress: Callable[[str], None] | None = None) -> VerifyResult:
    """Compare ``lake_table`` with the source table of ``job``; record it in meta.runs."""
    say = progress or (lambda text: log.info("verify %s: %s", job.name, text))
    started = time.monotonic()
    source, db, table = find_source(settings, job)
    run = Run(job=job.name)
    run.details["steps"] = ["verify"]
    side = verifier(source)
    conn = side.connect(source)
    try:
        target = side.resolve_target(spark, conn, source, job, lake_table, db, table)
        result = VerifyResult(job.name, lake_table, f"{db}.{table}",
                              position_kind=side.position_kind)
        lake = LakeSide(spark, target)
        result.lake_position = lake.position()
        result.source_position = side.snapshot(conn)
        say(f"comparing {db}.{table} at {result.position_kind} {result.source_position} with "
            f"{lake_table}")
        src = SourceSide(conn, target)
        rows = side.estimate(conn, db, table)
        mod, ranges = bisect(src, lake, result, rows, range_rows, fanout, say)
        if ranges:
            source_rows, lake_rows = src.rows(mod, ranges), lake.rows(mod, ranges)
            result.rows_moved = len(source_rows) + len(lake_rows)
            names = tuple(c.name for c in target.columns)
            found = diff_rows(source_rows, lake_rows, names)
            conn.rollback()  # end the snapshot: re-checks read the source as it is now
            result.differences = _settle(conn, target, lake, found, mod, settle_s, quiet_s, say)
            result.settled_keys = len(found) - len(result.differences)
        conn.rollback()
    except Exception as exc:
        run.finish(spark, "failed", f"{type(exc).__name__}: {exc}")
        raise
    finally:
        conn.close()
    result.seconds = time.monotonic() - started
    run.count("verify_source_rows", result.source_rows)
    run.count("verify_lake_rows", result.lake_rows)
    run.count("verify_differences", len(result.differences))
    run.count("verify_rows_moved", result.rows_moved)
    run.details["verify"] = result.as_dict()
    run.finish(spark, "verified-equal" if result.equal else "verified-different")
    return result


def _settle(conn: Any, target: Target, lake: LakeSide, found: list[Difference], mod: int,
            settle_s: float, quiet_s: float, say: Callable[[str], None]) -> list[Difference]:
    """Re-check differing keys while the pipeline catches up: lag is not a difference.

    A key is reported once it has differed, with neither its source row nor its lake row
    changing, for ``quiet_s`` (longer than one pipeline cycle), or when ``settle_s`` passed.
    A key whose rows match on a re-check is dropped.
    """
    if not found:
        return []
    names = tuple(c.name for c in target.columns)
    pending = {d.key: d for d in found}
    seen: dict[str, tuple[Any, Any, float]] = {}  # key -> (source row, lake row, since)
    deadline = time.monotonic() + settle_s
    while pending:
        now = time.monotonic()
        stable = [k for k, (_, _, since) in seen.items() if k in pending and
                  now - since >= quiet_s]
        if len(stable) == len(pending) or now >= deadline:
            break
        time.sleep(min(POLL_S, max(0.0, deadline - now)))
        keys = list(pending)
        source = SourceSide(conn, target)
        with conn.cursor() as cur:  # the ranges these keys fall in, from their key text
            cur.execute("SELECT " + ", ".join(source.bucket("%s", mod) for _ in keys),
                        tuple(keys))
            ranges = [int(b) for b in cur.fetchone()]
        source_rows = source.rows(mod, ranges)
        conn.rollback()
        lake_rows = lake.rows(mod, ranges)
        still = {d.key: d for d in diff_rows({k: source_rows[k] for k in keys if k in source_rows},
                                             {k: lake_rows[k] for k in keys if k in lake_rows},
                                             names)}
        checked = time.monotonic()
        for key in keys:
            if key not in still:  # equal now: it was lag
                del pending[key]
                continue
            pending[key] = still[key]
            state = (source_rows.get(key), lake_rows.get(key))
            if key not in seen or seen[key][:2] != state:
                seen[key] = (*state, checked)  # changed since the last look: still in flux
        say(f"re-checked {len(keys)} differing keys: {len(pending)} still differ")
    return sorted(pending.values(), key=lambda d: d.key)
