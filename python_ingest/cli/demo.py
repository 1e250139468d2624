"""The ``sluice demo`` commands (registered by python_ingest.cli.main): what ``make run``
does, and ``sluice demo produce``."""

from __future__ import annotations

import argparse

from python_ingest.cli.common import ensure_broker, spark_session
from python_ingest.cli.jobs import print_run
from python_ingest.config import Settings


def cmd_demo_produce(args: argparse.Namespace, settings: Settings) -> int:
    """Produce demo changelog events for the trips table."""
    from python_ingest.demo import trips as demo
    from python_ingest.kafka import broker

    ensure_broker(settings)
    bootstrap = settings.broker.bootstrap_servers
    broker.ensure_topic(bootstrap, args.topic, demo.DEMO_PARTITIONS)
    start = next_trip_id(settings, args.topic)
    generator = demo.TripsGenerator(demo.trips_schema(settings.root), seed=args.seed or start,
                                    first_trip_id=start)
    sent = demo.produce(bootstrap, args.topic, generator.events(args.events))
    print(f"produced {sent} demo events to {args.topic} on {bootstrap}")
    return 0


def next_trip_id(settings: Settings, topic: str) -> int:
    """New demo trips continue after those already produced (keeps runs distinct)."""
    from python_ingest.kafka.client import partition_offsets

    total = sum(p.end for p in partition_offsets(settings.broker.bootstrap_servers, topic))
    return total + 1


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    """What `make run` does: the full pipeline on demo data twice, then a summary per table.

    The second round adds late and duplicated re-deliveries, partial updates, deletes and rows
    that fail the expectation suite, on top of new trips.
    """
    from python_ingest.demo import trips as demo
    from python_ingest.kafka import broker
    from python_ingest.runtime.session import for_job
    from python_ingest.steps.pipeline import report_dir, run_all, table_summary

    ensure_broker(settings)
    bootstrap = settings.broker.bootstrap_servers
    broker.ensure_topic(bootstrap, demo.DEMO_TOPIC, demo.DEMO_PARTITIONS)
    start = next_trip_id(settings, demo.DEMO_TOPIC)
    generator = demo.TripsGenerator(demo.trips_schema(settings.root), seed=start,
                                    first_trip_id=start)
    spark = spark_session(settings)
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
            print_run(result)
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
