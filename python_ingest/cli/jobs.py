"""The commands that run jobs (registered by python_ingest.cli.main): ``sluice ingest``,
``sluice run`` (once; continuously: cli/runner.py) and ``sluice maintain``."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from python_ingest.cli.common import ensure_broker, spark_session
from python_ingest.config import Settings
from python_ingest.exceptions import SluiceError


def cmd_ingest(args: argparse.Namespace, settings: Settings) -> int:
    """Ingest new messages of one job (or all) into its raw table."""
    from python_ingest.runtime.session import active, for_job
    from python_ingest.steps.jobs import run_ingest
    from python_ingest.tables.names import JobTables

    names = sorted(settings.jobs) if args.all else [args.job]
    jobs = [settings.job(n) for n in names]  # unknown names fail before anything starts
    ensure_broker(settings, names)
    spark = spark_session(settings)
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


def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    """Run the whole pipeline of one job (or all): ingest, staging, fork, merge, reports."""
    from python_ingest.steps.pipeline import run_all

    names = sorted(settings.jobs) if args.all else list(args.job)
    for name in names:
        settings.job(name)  # unknown names fail before anything starts
    ensure_broker(settings, names)
    if args.continuous or args.duration or args.until_idle:
        from python_ingest.cli.runner import run_continuously

        return run_continuously(args, settings, names)
    if len(names) > 1:  # in parallel, by priority, as the runner runs them
        from python_ingest.runner.scheduler import fair_scheduler_conf

        conf = {**fair_scheduler_conf(settings, [settings.job(n) for n in names]),
                **settings.spark.conf}
        settings = dataclasses.replace(settings, spark=dataclasses.replace(settings.spark,
                                                                           conf=conf))
    spark = spark_session(settings)
    results = run_all(spark, settings, names, accept_data_loss=args.accept_data_loss,
                      keep_going=len(names) > 1)
    for result in results:
        print_run(result)
    if settings.reports:  # (`reports: false`: `sluice report` writes it on demand)
        from python_ingest.cli.report import print_dashboard

        print_dashboard(spark, settings, results)  # <state_dir>/reports/index.html
    failed = [r.job for r in results if r.outcome == "failed"]
    if failed:
        print(f"error: {len(failed)} of {len(results)} jobs failed: {', '.join(failed)} (the "
              "others ran; `sluice status --history` shows each run)", file=sys.stderr)
        return 1
    return 0


def print_run(result: Any) -> None:
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
    spark = spark_session(settings)
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
