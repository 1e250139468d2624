"""The ``sluice verify`` command (registered by python_ingest.cli.main)."""

from __future__ import annotations

import argparse
import json
import sys

from python_ingest.cli.common import AddCommand, print_comparison
from python_ingest.config import Settings


def cmd_verify(args: argparse.Namespace, settings: Settings) -> int:
    """Compare lake tables with their source tables: exit 0 only when every one is equal."""
    if args.history:  # the history's current versions against the lake, no source needed
        from python_ingest.cli.verify_history import cmd_verify_history

        return cmd_verify_history(args, settings)
    from python_ingest.runtime.session import active, build_session, for_job
    from python_ingest.steps.dbt import Dbt
    from python_ingest.tables.formats import name_tables
    from python_ingest.tables.names import JobTables
    from python_ingest.verify.run import fed_jobs, verify

    names = sorted(settings.jobs) if args.all else [args.job]
    jobs = [settings.job(n) for n in names]
    if args.all:  # only the jobs a tapped table feeds have a table to compare with
        fed = fed_jobs(settings)
        jobs = [j for j in jobs if j.name in fed]
    spark = build_session(settings)
    dbt = Dbt(settings)
    tty = sys.stderr.isatty() and not args.json
    results = []
    for job in jobs:
        lake = JobTables(job.name, dbt.job_models(job.name)).lake
        if lake is None:
            print(f"{job.name}: no lake model, nothing to verify", file=sys.stderr)
            continue

        def progress(text: str, name: str = job.name) -> None:
            if tty:
                print(f"\r\033[K{name}: {text}", end="", file=sys.stderr, flush=True)

        with active(for_job(spark, settings, job)) as session:
            name_tables(session, [lake])
            result = verify(session, settings, job, lake, range_rows=args.range_rows,
                            settle_s=args.settle_s, quiet_s=args.quiet_s, progress=progress)
        if tty:
            print("\r\033[K", end="", file=sys.stderr)
        results.append(result)
        if args.json:
            continue
        settled = ([f"{result.settled_keys} key(s) differed while the lake caught up, then "
                    "matched"] if result.settled_keys else [])
        print_comparison(
            job.name, result.equal, len(result.differences),
            f"{result.source_table} ({result.source_rows} rows, {result.position_kind} "
            f"{result.source_position}) vs {result.lake_table} ({result.lake_rows} rows, merged "
            f"up to ref {result.lake_position}); {result.ranges_checked} ranges checked, "
            f"{result.ranges_differing} differed, {result.rows_moved} rows fetched, "
            f"{result.seconds:.1f}s", result.differences, args.show, settled)
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2))
    return 0 if all(r.equal for r in results) else 1


def add_verify_commands(add: AddCommand) -> None:
    """Register ``sluice verify`` on the main parser's ``add`` helper."""
    p = add("verify", cmd_verify, "Prove lake tables equal their MariaDB/MySQL or PostgreSQL "
            "source tables (range checksums on both sides, bisection, row diff of differing "
            "ranges only).")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("job", nargs="?", help="job name from the config")
    target.add_argument("--all", action="store_true", help="every job a tapped table feeds")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--range-rows", type=int, default=64,
                   help="split differing ranges down to this many rows (default 64)")
    p.add_argument("--quiet-s", type=float, default=30.0,
                   help="a key that differs this long with neither side changing is reported "
                        "(longer than one pipeline cycle; default 30)")
    p.add_argument("--settle-s", type=float, default=300.0,
                   help="at most this long re-checking differing keys (default 300)")
    p.add_argument("--show", type=int, default=20, help="differences to print (default 20)")
    p.add_argument("--history", action="store_true",
                   help="instead: check that the job's history table (history: true) agrees "
                        "with its lake, its current versions equal to the lake's rows, row for "
                        "row (--all: every job with a history; docs/history.md)")
