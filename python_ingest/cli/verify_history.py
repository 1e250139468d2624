"""``sluice verify JOB|--all --history``: the history's current versions against the lake
(python_ingest/verify/history.py), printed as ``sluice verify`` prints its comparisons."""

from __future__ import annotations

import argparse
import json
import sys

from python_ingest.cli.common import print_comparison
from python_ingest.config import Settings


def cmd_verify_history(args: argparse.Namespace, settings: Settings) -> int:
    """Exit 0 only when every checked job's current versions equal its lake row for row."""
    from python_ingest.exceptions import NoHistoryTableError
    from python_ingest.feed.changes import history_table
    from python_ingest.runtime.session import active, build_session, for_job
    from python_ingest.steps.dbt import Dbt
    from python_ingest.tables.formats import name_tables
    from python_ingest.tables.names import JobTables
    from python_ingest.verify.history import check_current

    jobs = [settings.job(n) for n in (sorted(settings.jobs) if args.all else [args.job])]
    spark = build_session(settings)
    dbt = Dbt(settings)
    results = []
    for job in jobs:
        tables = JobTables(job.name, dbt.job_models(job.name))
        with active(for_job(spark, settings, job)) as session:
            try:
                history = history_table(session, job, tables)
            except NoHistoryTableError:
                if not args.all:
                    raise
                continue  # --all: the jobs that keep a history
            assert tables.lake is not None
            name_tables(session, [tables.lake])
            result = check_current(session, job.name, tables.lake, history)
        results.append(result)
        if args.json:
            continue
        print_comparison(
            job.name, result.equal, result.differing_keys,
            f"current versions of {result.history_table} ({result.current_rows} rows) vs "
            f"{result.lake_table} ({result.lake_rows} rows), {result.seconds:.1f}s",
            result.differences, args.show)
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2, default=str))
    elif not results:
        print("no job keeps a history table (history: true on a lake model; docs/history.md)",
              file=sys.stderr)
    return 0 if all(r.equal for r in results) else 1
