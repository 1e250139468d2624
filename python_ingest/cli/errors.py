"""``sluice errors JOB`` and ``sluice errors replay JOB``: a job's error rows by reason, and
sending chosen ones through the pipeline again (python_ingest/replay/)."""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Callable
from typing import Any

from python_ingest.config import Settings
from python_ingest.exceptions import ReplayError

log = logging.getLogger(__name__)

REPLAY = "replay"
HELP = ("List a job's error rows grouped by reason (`sluice errors JOB`), or replay chosen ones "
        "through staging, the fork and the merge once the converter, suite, schema or row is "
        "fixed (`sluice errors replay JOB [--reason R] [--where SQL] [--set 'col = SQL']`).")


def cmd_errors(args: argparse.Namespace, settings: Settings) -> int:
    """Dispatch ``errors JOB`` / ``errors replay JOB``."""
    words = list(args.target)
    replaying = words[0] == REPLAY and len(words) == 2
    if len(words) != 1 and not replaying:
        raise ReplayError("usage: sluice errors JOB | sluice errors replay JOB [options]")
    job = settings.job(words[-1])
    if not replaying and (args.set or args.dry_run):
        raise ReplayError("--set and --dry-run go with 'sluice errors replay JOB'")
    if not replaying and not args.where:  # (a --where is Spark SQL: Spark evaluates it)
        counts = _native_counts(settings, job, args.reason)
        if counts is not None:
            return _print(args, job.name, counts)
    from python_ingest.runtime.session import activate, build_session, for_job

    spark = for_job(build_session(settings), settings, job)  # the job's table format
    activate(spark)
    if replaying:
        return _replay(args, settings, spark, job)
    return _list(args, spark, job.name)


def _list(args: argparse.Namespace, spark: Any, job: str) -> int:
    from python_ingest.replay.selection import by_reason, chosen, error_rows

    rows = error_rows(spark, job)
    counts = [] if rows is None else by_reason(
        chosen(rows, args.reason, args.where, include_resolved=True))
    return _print(args, job, counts)


def _native_counts(settings: Settings, job: Any, reason: str | None) -> list[Any] | None:
    """The listing's counts read without a JVM (tables/native.py); None: read through Spark."""
    from python_ingest.replay.selection import native_counts
    from python_ingest.tables.native import NativeLake, NativeUnavailable

    try:
        return native_counts(NativeLake.of(settings, job), job.name, reason)
    except NativeUnavailable as exc:
        log.debug("errors of %s through Spark: %s", job.name, exc)
        return None


def _print(args: argparse.Namespace, job: str, counts: list[Any]) -> int:
    if args.json:
        print(json.dumps({"job": job, "reasons": [c.__dict__ for c in counts]}, indent=2))
        return 0
    if not counts:
        print(f"{job}: no error rows")
        return 0
    waiting = sum(c.unresolved for c in counts)
    print(f"{job}: {waiting} unresolved error rows, "
          f"{sum(c.resolved for c in counts)} resolved by replays")
    print(f"  {'unresolved':>10} {'resolved':>8}  step    reason")
    for c in counts:
        print(f"  {c.unresolved:>10} {c.resolved:>8}  {c.step:<7} {c.reason}")
    if waiting:
        print(f"replay them once fixed: sluice errors replay {job} [--reason TEXT] "
              "[--where SQL] [--set 'column = SQL']")
    return 0


def _replay(args: argparse.Namespace, settings: Settings, spark: Any, job: Any) -> int:
    from python_ingest.replay.replay import Selection, replay

    selection = Selection(args.reason, args.where, tuple(args.set or ()))
    result = replay(spark, settings, job, selection, dry_run=args.dry_run)
    if args.dry_run or result.run is None:
        print(f"{job.name}: {result.selected} unresolved error rows match"
              + ("" if args.dry_run or result.selected else "; nothing to replay"))
        return 0
    run = result.run
    counts = run.counts
    print(f"{job.name}: replayed {result.replayed} of {result.selected} error rows as batch "
          f"{run.batch_id} (run {run.run_id}; {result.still_failing} still fail to decode): "
          f"valid {counts.get('valid', 0)}, expectation errors "
          f"{counts.get('expectation_errors', 0)}, inserted {counts.get('inserted', 0)}, "
          f"updated {counts.get('updated', 0)}, deleted {counts.get('deleted', 0)}, merge "
          f"errors {counts.get('merge_errors', 0)}")
    return 0


def add_errors_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
    """Register ``sluice errors``."""
    p = add("errors", cmd_errors, HELP)
    p.usage = ("sluice errors JOB [--reason TEXT] [--where SQL] [--json]\n"
               "       sluice errors replay JOB [--reason TEXT] [--where SQL] "
               "[--set 'COLUMN = SQL' ...] [--dry-run]")
    p.add_argument("target", nargs="+", metavar="[replay] JOB",
                   help="a job name from the config, after 'replay' to replay its errors")
    p.add_argument("--reason", metavar="TEXT",
                   help="only error rows whose reason contains TEXT (case-insensitive)")
    p.add_argument("--where", metavar="SQL",
                   help="only error rows matching this SQL condition on the columns error_id, "
                        "step, batch_id, partition, offset, row_key, ref_key, reason, "
                        "source_data, errored_at (docs/error-replay.md)")
    p.add_argument("--set", action="append", metavar="'COLUMN = SQL'",
                   help="replay: fix a column of the replayed rows first (repeatable); the "
                        "SQL sees the row's raw columns")
    p.add_argument("--dry-run", action="store_true",
                   help="replay: only count the error rows that would be replayed")
    p.add_argument("--json", action="store_true", help="list: counts as JSON")
