"""The ``sluice report`` command (registered by python_ingest.cli.main), and the dashboard
line that ``sluice run`` and ``sluice demo`` print after their runs."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from python_ingest.cli.common import AddCommand
from python_ingest.config import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("sluice")


def cmd_report(args: argparse.Namespace, settings: Settings) -> int:
    """Write the run dashboard and the jobs' error summaries; print the dashboard's path."""
    from python_ingest.reports.dashboard import write_dashboard
    from python_ingest.runtime.session import build_session

    names = args.job or sorted(settings.jobs)
    for name in names:
        settings.job(name)  # unknown names fail before Spark starts
    path = write_dashboard(build_session(settings), settings, names, runs=args.runs)
    print(f"dashboard: {path}")
    return 0


def print_dashboard(spark: SparkSession, settings: Settings,
                    results: Sequence[Any] = ()) -> None:
    """After runs: write the dashboard of every job and print its path. A failure here is
    logged, never raised: the runs themselves are done and recorded."""
    from python_ingest.reports.dashboard import write_dashboard

    tables = {r.job: r.tables for r in results if getattr(r, "tables", None) is not None}
    try:
        path = write_dashboard(spark, settings, tables=tables)
    except Exception:
        log.exception("could not write the run dashboard ('sluice report' retries)")
        return
    print(f"dashboard: {path}")


def add_report_commands(add: AddCommand) -> None:
    report = add("report", cmd_report, "Write the run dashboard (<state_dir>/reports/"
                                       "index.html: jobs, runs over time, plots) and each "
                                       "job's error summary.")
    report.add_argument("job", nargs="*", help="job names (default: every job in the config)")
    report.add_argument("--runs", type=int, default=50,
                        help="how many recent runs per job to plot (default 50)")
