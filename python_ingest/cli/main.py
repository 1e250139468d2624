"""The ``sluice`` command line.

Heavy libraries (pyspark, dbt, great_expectations) are imported inside the commands, so
``sluice --help`` and config errors answer at once.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from python_ingest.changelog.schema import check_job_schemas
from python_ingest.config import Settings, load_settings
from python_ingest.exceptions import SluiceError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("sluice")


def _session(settings: Settings) -> SparkSession:
    from python_ingest.runtime.session import build_session

    return build_session(settings)


def _ensure_broker(settings: Settings, names: list[str] | None = None) -> None:
    """Start the embedded broker if configured, unless every job of ``names`` reads files."""
    from python_ingest.kafka import broker

    if names is not None and all(settings.job(n).files is not None for n in names):
        return
    if settings.broker.embedded and broker.start(settings):
        print(f"started the embedded broker on {settings.broker.bootstrap_servers}")


def cmd_ingest(args: argparse.Namespace, settings: Settings) -> int:
    """Ingest new messages of one job (or all) into its raw table."""
    from python_ingest.runtime.session import active, for_job
    from python_ingest.steps.jobs import run_ingest
    from python_ingest.tables.names import JobTables

    names = sorted(settings.jobs) if args.all else [args.job]
    jobs = [settings.job(n) for n in names]  # unknown names fail before anything starts
    _ensure_broker(settings, names)
    spark = _session(settings)
    failed = []
    for job in jobs:
        try:
            with active(for_job(spark, settings, job)) as session:
                result = run_ingest(session, settings, job,
                                    accept_data_loss=args.accept_data_loss)
        except SluiceError as exc:
            if len(jobs) == 1:
                raise
            failed.append(job.name)  # one broken job never stops the others
            print(f"{job.name}: failed: {exc}", file=sys.stderr)
            continue
        if result.up_to_date:
            print(f"{job.name}: up to date, nothing new on "
                  f"{job.files.path if job.files else job.topic}")
        else:
            print(f"{job.name}: batch {result.batch_id}: read {result.read}, landed "
                  f"{result.landed} in {JobTables(job.name).raw}, {result.errors} errors in "
                  f"{JobTables(job.name).raw_errors}" + ("" if job.files else
                  f"; {result.plan.remaining} messages left for later runs"))
    if failed:
        print(f"error: {len(failed)} of {len(jobs)} jobs failed: {', '.join(failed)}",
              file=sys.stderr)
        return 1
    return 0


def cmd_broker(args: argparse.Namespace, settings: Settings) -> int:
    """Start, stop or check the embedded broker."""
    from python_ingest.kafka import broker

    bootstrap = settings.broker.bootstrap_servers
    if args.action == "start":
        started = broker.start(settings)
        print(f"broker {'started' if started else 'already running'} on {bootstrap}")
    elif args.action == "stop":
        stopped = broker.stop(settings)
        print(f"broker {'stopped' if stopped else 'was not running'} (data kept in "
              f"{settings.broker.data_dir})")
    else:
        up = broker.is_up(bootstrap)
        state = broker.status(settings) if settings.broker.embedded else None
        detail = ""
        if state is not None:
            detail = (f" (embedded Apache Kafka {state.version or '?'}"
                      + (f", pid {state.pid}" if state.pid else ", not started by sluice")
                      + f", data in {state.data_dir})")
        print(f"broker on {bootstrap}: {'up' if up else 'down'}{detail}")
        return 0 if up else 1
    return 0


def cmd_demo_produce(args: argparse.Namespace, settings: Settings) -> int:
    """Produce demo changelog events for the trips table."""
    from python_ingest.demo import trips as demo
    from python_ingest.kafka import broker

    _ensure_broker(settings)
    bootstrap = settings.broker.bootstrap_servers
    broker.ensure_topic(bootstrap, args.topic, demo.DEMO_PARTITIONS)
    start = _demo_next_trip_id(settings, args.topic)
    generator = demo.TripsGenerator(demo.trips_schema(settings.root), seed=args.seed or start,
                                    first_trip_id=start)
    sent = demo.produce(bootstrap, args.topic, generator.events(args.events))
    print(f"produced {sent} demo events to {args.topic} on {bootstrap}")
    return 0


def _demo_next_trip_id(settings: Settings, topic: str) -> int:
    """New demo trips continue after those already produced (keeps runs distinct)."""
    from python_ingest.kafka.client import partition_offsets

    total = sum(p.end for p in partition_offsets(settings.broker.bootstrap_servers, topic))
    return total + 1


def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    """Run the whole pipeline of one job (or all): ingest, staging, fork, merge, reports."""
    from python_ingest.steps.pipeline import run_all

    names = sorted(settings.jobs) if args.all else list(args.job)
    for name in names:
        settings.job(name)  # unknown names fail before anything starts
    _ensure_broker(settings, names)
    if args.continuous or args.duration or args.until_idle:
        from python_ingest.cli.runner import run_continuously

        return run_continuously(args, settings, names)
    if len(names) > 1:  # in parallel, by priority, as the runner runs them
        from python_ingest.runner.scheduler import fair_scheduler_conf

        conf = {**fair_scheduler_conf(settings, [settings.job(n) for n in names]),
                **settings.spark.conf}
        settings = dataclasses.replace(settings, spark=dataclasses.replace(settings.spark,
                                                                           conf=conf))
    spark = _session(settings)
    results = run_all(spark, settings, names, accept_data_loss=args.accept_data_loss,
                      keep_going=len(names) > 1)
    for result in results:
        _print_run(result)
    from python_ingest.cli.report import print_dashboard

    print_dashboard(spark, settings, results)  # <state_dir>/reports/index.html
    failed = [r.job for r in results if r.outcome == "failed"]
    if failed:
        print(f"error: {len(failed)} of {len(results)} jobs failed: {', '.join(failed)} (the "
              "others ran; `sluice status --history` shows each run)", file=sys.stderr)
        return 1
    return 0


def _print_run(result: Any) -> None:
    counts = result.counts
    if result.outcome == "failed":
        print(f"{result.job}: failed, run {result.run_id}: {result.error}")
        return
    print(f"{result.job}: {result.outcome}, run {result.run_id}, batch {result.batch_id}: "
          f"read {counts.get('read', 0)}, landed {counts.get('landed', 0)}, decode errors "
          f"{counts.get('decode_errors', 0)}, valid {counts.get('valid', 0)}, expectation "
          f"errors {counts.get('expectation_errors', 0)}, inserted {counts.get('inserted', 0)}, "
          f"updated {counts.get('updated', 0)}, deleted {counts.get('deleted', 0)}, merge "
          f"errors {counts.get('merge_errors', 0)}"
          + (f", dispersed {counts['dispersed_upserted']} upserts and "
             f"{counts.get('dispersed_deleted', 0)} deletes" if "dispersed_upserted" in counts
             else ""))
    if result.report:
        print(f"  expectation report: {result.report}")


def cmd_maintain(args: argparse.Namespace, settings: Settings) -> int:
    """Run the table services of a job's tables now."""
    from python_ingest.runtime.session import active, for_job
    from python_ingest.steps.dbt import Dbt
    from python_ingest.steps.services import maintain_job, maintained_as_details, record_services
    from python_ingest.tables.runs import Run

    jobs = [settings.job(n) for n in (sorted(settings.jobs) if args.all else [args.job])]
    spark = _session(settings)
    dbt = Dbt(settings)
    for job in jobs:
        run = Run(job=job.name, details={"by": "sluice maintain"})
        with active(for_job(spark, settings, job)) as session:
            try:
                done_by_table = maintain_job(session, dbt, job)
            except Exception as exc:  # recorded in meta.runs, then reported as usual
                record_services(session, job.name, run, None, f"{type(exc).__name__}: {exc}")
                raise
            record_services(session, job.name, run, maintained_as_details(done_by_table))
        for table, done in done_by_table.items():
            print(f"{job.name}: {table}: {'; '.join(done)}")
    return 0


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    """What `make run` does: the full pipeline on demo data twice, then a summary per table.

    The second round adds late and duplicated re-deliveries, partial updates, deletes and rows
    that fail the expectation suite, on top of new trips.
    """
    from python_ingest.demo import trips as demo
    from python_ingest.kafka import broker
    from python_ingest.runtime.session import for_job
    from python_ingest.steps.pipeline import report_dir, run_all, table_summary

    _ensure_broker(settings)
    bootstrap = settings.broker.bootstrap_servers
    broker.ensure_topic(bootstrap, demo.DEMO_TOPIC, demo.DEMO_PARTITIONS)
    start = _demo_next_trip_id(settings, demo.DEMO_TOPIC)
    generator = demo.TripsGenerator(demo.trips_schema(settings.root), seed=start,
                                    first_trip_id=start)
    spark = _session(settings)
    names = sorted(settings.jobs)
    if "trips_files" in settings.jobs:  # a file-drop job beside the Kafka one
        from python_ingest.demo.files import write_demo_partitions

        landing = write_demo_partitions(settings.path(settings.state_dir))
        print(f"wrote hourly partitions of trips files (Avro, JSON, CSV, Parquet) to {landing}")
    results = []
    for round_no in (1, 2):
        if round_no == 1:
            events = list(generator.events(args.events))
        else:
            generator.invalid_rate = 0.02
            events = list(generator.late_events(args.events // 10))
            events += list(generator.events(args.events // 2))
        sent = demo.produce(bootstrap, demo.DEMO_TOPIC, iter(events))
        kinds: dict[str, int] = {}
        for event in events:
            kinds[event.kind] = kinds.get(event.kind, 0) + 1
        print(f"\nround {round_no}: produced {sent} events to {demo.DEMO_TOPIC} ("
              + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) + ")")
        for result in run_all(spark, settings, names):
            _print_run(result)
            results.append(result)
    from python_ingest.demo.errors import replay_demo_errors

    replay_demo_errors(spark, settings)  # sluice errors trips; sluice errors replay trips ...
    print("\nsummary (rows per table)")
    for result in results[-len(names):]:
        if result.tables is None:
            continue
        for table, rows in table_summary(for_job(spark, settings, settings.job(result.job)),
                                         result.tables).items():
            print(f"  {table:<40} {rows:>8}")
        print(f"  expectation reports: {report_dir(settings, result.job) / 'index.html'}")
    from python_ingest.demo.history import show_history

    for result in results[-len(names):]:  # the jobs whose lake model keeps a history
        if result.tables is not None:
            show_history(for_job(spark, settings, settings.job(result.job)), result.tables)
    if args.live_seconds > 0:
        from python_ingest.demo.live import run_live

        print(f"\nthe job manager: events keep arriving ({args.live_rate}/s) for "
              f"{args.live_seconds:.0f}s while a continuous runner merges them batch after batch "
              "(what 'sluice run --all --continuous' does; docs/runner.md)", flush=True)
        sent = run_live(spark, settings, generator, args.live_seconds, args.live_rate)
        print(f"  runner stopped; {sent} events produced meanwhile, all merged or left for the "
              "next run (see 'sluice status')")
    from python_ingest.demo.dispersal import run_dispersal_demo

    trips = [r.tables for r in results if r.job == "trips" and r.tables is not None]
    dispersed = not trips or run_dispersal_demo(spark, settings, trips[-1])
    print("see 'sluice status' for where each job stands, docs/pipeline.md for what happened")
    from python_ingest.demo.binlog import run_binlog_demo

    binlog_ok = run_binlog_demo(spark, settings)
    from python_ingest.demo.postgres import run_postgres_demo

    postgres_ok = run_postgres_demo(spark, settings)  # docs/postgres-source.md
    from python_ingest.cli.report import print_dashboard

    print_dashboard(spark, settings, results)  # the run dashboard, last: `make run` ends here
    return 0 if binlog_ok and dispersed and postgres_ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sluice",
        description="Land change data (Kafka changelog events) in Hudi or Iceberg tables on "
                    "Spark, exactly once.",
        epilog="Config: sluice.yml in the current folder, or --config / $SLUICE_CONFIG; "
               "environment variables SLUICE_* override it (see README).")
    parser.add_argument("--config", help="config file (default: ./sluice.yml or $SLUICE_CONFIG)")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, func: Callable[[argparse.Namespace, Settings], int], help_text: str
            ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(func=func)
        return p

    def add_jobs_target(p: argparse.ArgumentParser) -> None:
        target = p.add_mutually_exclusive_group(required=True)
        target.add_argument("job", nargs="?", help="job name from the config")
        target.add_argument("--all", action="store_true", help="every job in the config")
        p.add_argument("--accept-data-loss", action="store_true",
                       help="continue from the earliest offset when the checkpoint's offsets "
                            "are gone (the loss is recorded in the run)")

    add_jobs_target(add("ingest", cmd_ingest,
                        "Ingest new Kafka messages of a job into raw.<table>."))

    from python_ingest.cli.runner import add_status_command

    add_status_command(add)  # sluice status

    run = add("run", cmd_run, "Run jobs' pipelines: ingest, staging (dbt), fork (Great "
              "Expectations), merge into the lake table, reports; once, or continuously.")
    target = run.add_mutually_exclusive_group(required=True)
    target.add_argument("job", nargs="*", default=[], help="job name(s) from the config")
    target.add_argument("--all", action="store_true", help="every job in the config")
    run.add_argument("--accept-data-loss", action="store_true",
                     help="continue from the earliest offset when the checkpoint's offsets are "
                          "gone (the loss is recorded in the run)")
    from python_ingest.cli.runner import add_runner_options

    add_runner_options(run)

    maintain = add("maintain", cmd_maintain, "Run the table services of a job's tables now "
                   "(Hudi: compaction, cleaning, archival; Iceberg: compaction, snapshot "
                   "expiry keeping every checkpoint, orphan files older than 3 days removed; "
                   "the global index compacted; raw rows older than services.raw_retention "
                   "expired).")
    target = maintain.add_mutually_exclusive_group(required=True)
    target.add_argument("job", nargs="?", help="job name from the config")
    target.add_argument("--all", action="store_true", help="every job in the config")

    brk = add("broker", cmd_broker, "Start, stop or check the embedded Apache Kafka broker.")
    brk.add_argument("action", choices=("start", "stop", "status"))

    demo_p = add("demo", cmd_demo, "Run the demo: broker, demo events, the full pipeline "
                                    "twice, a summary.")
    demo_p.add_argument("--events", type=int, default=20_000, help="events to produce")
    demo_p.add_argument("--live-seconds", type=float, default=60, metavar="S",
                        help="then run the job manager continuously for S seconds while events "
                             "keep arriving (0: skip; default 60)")
    demo_p.add_argument("--live-rate", type=int, default=50, metavar="N",
                        help="events per second produced meanwhile (default 50)")
    demo_sub = demo_p.add_subparsers(dest="demo_command", metavar="SUBCOMMAND")
    produce = demo_sub.add_parser("produce", help="only produce demo changelog events",
                                  description="Produce demo changelog events for 'trips'.")
    produce.add_argument("--events", type=int, default=20_000, help="how many (default 20000)")
    produce.add_argument("--topic", default="demo.trips", help="topic (default demo.trips)")
    produce.add_argument("--seed", type=int, help="random seed (default: derived from the topic)")
    produce.set_defaults(func=cmd_demo_produce)

    from python_ingest.cli.tap import add_tap_commands

    add_tap_commands(add)  # sluice tap, sluice bootstrap
    from python_ingest.cli.report import add_report_commands

    add_report_commands(add)  # sluice report
    from python_ingest.cli.verify import add_verify_commands

    add_verify_commands(add)  # sluice verify
    from python_ingest.cli.changes import add_changes_command

    add_changes_command(add)  # sluice changes
    from python_ingest.cli.errors import add_errors_commands

    add_errors_commands(add)  # sluice errors [replay]
    from python_ingest.cli.disperse import add_disperse_command

    add_disperse_command(add)  # sluice disperse
    from python_ingest.cli.debezium import add_debezium_commands

    add_debezium_commands(add)  # sluice debezium scaffold
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    import contextlib
    import faulthandler
    import signal

    # `kill -USR1 <pid>` prints every thread's stack to stderr (when stderr is a file: not when
    # the CLI is called in-process under a captured stream)
    with contextlib.suppress(AttributeError, ValueError, OSError):
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    for noisy in ("py4j", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING if not args.verbose else logging.INFO)
    # kafka-python logs connection chatter (even as ERROR on a normal close); sluice itself
    # reports broker problems as errors that say what to do.
    logging.getLogger("kafka").setLevel(logging.CRITICAL if not args.verbose else logging.INFO)
    try:
        settings = load_settings(args.config)
        check_job_schemas(settings)  # every job's schema parses and has its keys: before data moves
        return int(args.func(args, settings))
    except SluiceError as exc:
        print(f"sluice: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("sluice: interrupted; the last committed checkpoint stays in place",
              file=sys.stderr)
        return 130
    except Exception:
        from python_ingest.runtime.session import jvm_exit

        gone = jvm_exit()
        if gone is None:
            raise
        # py4j's connection errors say only that the JVM did not answer: say why
        print(f"sluice: error: {gone}; the last committed checkpoint stays in place",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
