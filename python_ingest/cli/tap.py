"""The ``sluice tap`` and ``sluice bootstrap`` commands (registered by python_ingest.cli.main)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from python_ingest.cli.common import AddCommand, add_history_flag
from python_ingest.config import Settings, SourceConfig
from python_ingest.exceptions import SluiceError


def cmd_tap(args: argparse.Namespace, settings: Settings) -> int:
    """Tap a source's binlog (or PostgreSQL slot) into Kafka until stopped (SIGTERM/SIGINT stop
    it cleanly)."""
    import yaml

    from python_ingest.sources.tap import kinds
    from python_ingest.sources.tap.jobs import job_configs

    source = settings.source(args.source)
    if args.print_jobs:
        print(yaml.safe_dump({"jobs": job_configs(settings, source)}, sort_keys=False), end="")
        return 0
    if args.scaffold:
        return _scaffold(args, settings, source)
    from python_ingest.kafka import broker

    if settings.broker.embedded and broker.start(settings):
        print(f"started the embedded broker on {settings.broker.bootstrap_servers}")
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        tap = kinds.tap(settings, source, stop)
        stats = tap.run(until_end=args.until_end)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    print(f"tap {source.name}: {stats.row_changes} row changes, {stats.messages} messages, "
          f"{stats.transactions} transactions; checkpoint {tap.store.path}")
    for table, info in sorted(tap.stopped.items()):
        where = info["lsn"] if "lsn" in info else f"{info['file']}:{info['pos']}"
        print(f"  STOPPED {table} at {where}: {info['error']}")
    return 1 if tap.stopped else 0


def _scaffold(args: argparse.Namespace, settings: Settings, source: SourceConfig) -> int:
    """Write each tapped table's dbt models and suite, and add its job to the config."""
    from python_ingest.cli.scaffolding import config_file, say_scaffolded
    from python_ingest.sources.tap import kinds
    from python_ingest.steps.dbt import project_dir

    config = config_file(args)
    project = project_dir(settings)
    result = kinds.scaffold(source)(settings, source, project,
                                    config if config.is_file() else None, history=args.history)
    say_scaffolded(result, project, config, "next: `sluice run --all` (or `sluice run <job>`) "
                   f"after `sluice tap {source.name}`")
    return 0


def cmd_bootstrap(args: argparse.Namespace, settings: Settings) -> int:
    """Snapshot one table into its topic and hand over to the tap."""
    from python_ingest.cli.progress import printer
    from python_ingest.kafka import broker
    from python_ingest.sources.tap import kinds

    if args.reload and not args.direct:
        raise SluiceError("--reload goes with --direct: it replaces the job's lake "
                          "(`sluice bootstrap SOURCE TABLE --direct --reload`)")
    source = settings.source(args.source)
    if settings.broker.embedded and broker.start(settings):
        print(f"started the embedded broker on {settings.broker.bootstrap_servers}")
    if args.direct:
        return _direct(args, settings, source)
    kinds.bootstrap(settings, source, args.table, workers=args.workers,
                    chunk_rows=args.chunk_rows, progress=printer(sys.stdout))
    return 0


def _direct(args: argparse.Namespace, settings: Settings, source: SourceConfig) -> int:
    """``--direct``: the table straight into its job's lake by Spark tasks (issue #62)."""
    from python_ingest.cli.progress import printer
    from python_ingest.runtime.session import build_session
    from python_ingest.sources.tap import kinds
    from python_ingest.steps.bootstrap import direct_bootstrap

    kinds.direct(source)  # an error if the kind has none, before Spark starts
    spark = build_session(settings)
    direct_bootstrap(spark, settings, source, args.table, args.chunk_rows, args.wave,
                     printer(sys.stdout), reload=args.reload)
    return 0


def add_tap_commands(add: AddCommand) -> None:
    """Register ``tap`` and ``bootstrap`` on the main parser (``add`` from build_parser)."""
    tap = add("tap", cmd_tap, "Tap a MariaDB/MySQL binlog or a PostgreSQL slot (sources: in "
                              "sluice.yml) into one Kafka topic per table; SIGTERM/SIGINT stop "
                              "it cleanly.")
    tap.add_argument("source", help="source name from the config's sources:")
    tap.add_argument("--until-end", action="store_true",
                     help="stop at the binlog's (PostgreSQL: the WAL's) current end instead of "
                          "waiting for more")
    tap.add_argument("--print-jobs", action="store_true",
                     help="register each tapped table's schema and print the jobs: config "
                          "that ingests its topic, then exit")
    tap.add_argument("--scaffold", action="store_true",
                     help="for each tapped table write a generic staging converter, lake model "
                          "and expectation suite into the dbt project and add its job to the "
                          "config (idempotent), then exit")
    add_history_flag(tap, "with --scaffold: ")
    boot = add("bootstrap", cmd_bootstrap, "Publish a table's current rows as a consistent "
                                           "snapshot, then hand over to the tap.")
    boot.add_argument("source", help="source name from the config's sources:")
    boot.add_argument("table", help="the table as <database>.<table> (PostgreSQL: "
                                    "<schema>.<table>, several joined by commas, or 'all')")
    boot.add_argument("--workers", type=int, help="parallel reader processes "
                                                  "(default: the source's bootstrap_workers)")
    boot.add_argument("--chunk-rows", type=int, help="rows per key-ordered chunk "
                                                     "(default: the source's bootstrap_chunk_rows)")
    boot.add_argument("--direct", action="store_true",
                      help="load the table straight into its job's lake: chunks read by Spark "
                           "tasks, the converter and suite applied, the lake written as all "
                           "inserts, the index built in bulk (MariaDB, MySQL and PostgreSQL; "
                           "docs/bootstrap.md)")
    boot.add_argument("--reload", action="store_true",
                      help="with --direct: replace a lake that holds rows (the lake and its "
                           "index dropped and loaded again; raw and error tables kept)")
    boot.add_argument("--wave", type=int, help="with --direct: chunks landed per raw batch "
                                               "(default: twice the Spark cores)")
