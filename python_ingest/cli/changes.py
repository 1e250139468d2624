"""The ``sluice changes`` command (registered by python_ingest.cli.main): a job's change feed
between two points, from its history table (python_ingest/feed/changes.py, docs/history.md)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterable
from typing import Any, TextIO

from python_ingest.cli.common import AddCommand
from python_ingest.config import Settings

log = logging.getLogger(__name__)

HELP = ("List the inserts, updates (before and after images) and deletes of a job's lake "
        "between two points, from its history table (a lake model with history: true; "
        "docs/history.md). Complete on merge-on-read lakes: log and delete files not yet "
        "compacted are read.")
POINT_HELP = ("a batch id (a whole number: the versions the batch opened, by _batch_id) or an "
              "ISO time, UTC unless it has an offset (the versions whose source commit time, "
              "_valid_from = _event_ts, is at or after it; an invalidated delete: its "
              "_valid_to)")
WIDTH = 100  # the human output's change column is cut to this many characters


def cmd_changes(args: argparse.Namespace, settings: Settings) -> int:
    """Print the change feed of one job (a table, or JSON lines with --json)."""
    from python_ingest.feed.changes import check_range, parse_point

    job = settings.job(args.job)
    since = parse_point(args.since, "--since")
    until = parse_point(args.until, "--until") if args.until else None
    check_range(since, until)
    from python_ingest.steps.dbt import Dbt
    from python_ingest.tables.names import JobTables

    span = f"from {since}" + (f" to {until}" if until else "")
    dbt = Dbt(settings)
    models = dbt.saved_job_models(job.name)  # no dbt parse when the project is unchanged
    native = None if models is None else _native_feed(
        settings, job, JobTables(job.name, models), since, until)
    if native is not None:
        table, changes = native
    else:
        from python_ingest.feed.changes import history_table, read_changes
        from python_ingest.runtime.session import activate, build_session, for_job

        spark = for_job(build_session(settings), settings, job)  # the job's table format
        activate(spark)
        table = history_table(spark, job, JobTables(job.name, dbt.job_models(job.name)))
        if sys.stderr.isatty() and not args.json:
            print(f"reading {table} {span} ...", file=sys.stderr, flush=True)
        changes = read_changes(spark, table, since, until)
    if args.json:
        for change in changes:
            print(change.as_json())
        return 0
    counts = print_table(changes, sys.stdout)
    total = sum(counts.values())
    print(f"{job.name}: {total} changes in {table} {span}: "
          + ", ".join(f"{counts[op]} {op}s" for op in ("insert", "update", "delete")))
    return 0


def _native_feed(settings: Settings, job: Any, tables: Any, since: Any, until: Any
                 ) -> tuple[str, Iterable[Any]] | None:
    """The history table and its feed, read without a JVM (tables/native.py, feed/rows.py);
    None: read through Spark (no such table there, or the reader cannot)."""
    from python_ingest.feed.rows import native_changes
    from python_ingest.tables.native import NativeLake, NativeUnavailable

    table = tables.history
    try:
        lake = NativeLake.of(settings, job)
        if table is None or not lake.exists(table):
            return None  # Spark says what to do (NoHistoryTableError)
        return table, native_changes(lake, table, since, until)
    except NativeUnavailable as exc:
        log.debug("changes of %s through Spark: %s", job.name, exc)
        return None


def print_table(changes: Iterable[Any], out: TextIO) -> dict[str, int]:
    """The human table: op, key, ref key, batch, source time, and what changed (an update:
    only its changed columns, ``before -> after``); returns the count per op."""
    counts = {"insert": 0, "update": 0, "delete": 0}
    header = False
    for change in changes:
        if not header:
            print(f"{'op':<7} {'key':<12} {'ref_key':>19} {'batch':>6} {'event_ts':<26} change",
                  file=out)
            header = True
        counts[change.op] = counts.get(change.op, 0) + 1
        when = "" if change.event_ts is None else change.event_ts.isoformat(sep=" ")
        ref = "" if change.ref_key is None else str(change.ref_key)
        batch = "" if change.batch_id is None else str(change.batch_id)
        print(f"{change.op:<7} {_cut(change.key, 12):<12} {ref:>19} {batch:>6} {when:<26} "
              f"{_cut(change.summary(), WIDTH)}", file=out)
    return counts


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def add_changes_command(add: AddCommand) -> None:
    """Register ``sluice changes``."""
    p = add("changes", cmd_changes, HELP)
    p.add_argument("job", help="job name from the config")
    p.add_argument("--since", required=True, metavar="BATCH|TIME",
                   help=f"where the feed starts, included: {POINT_HELP}")
    p.add_argument("--until", metavar="BATCH|TIME",
                   help="where it ends, included (default: the newest batch); a batch id or a "
                        "time as for --since (versions whose _batch_id, or _valid_from, is at "
                        "or before it)")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per line: op, key, ref_key, event_ts, batch_id, "
                        "before, after (payload columns; decimals as text, times ISO)")
