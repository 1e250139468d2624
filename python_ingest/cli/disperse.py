"""The ``sluice disperse`` command (registered by python_ingest.cli.main)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from python_ingest.config import Settings
from python_ingest.exceptions import ConfigError


def cmd_disperse(args: argparse.Namespace, settings: Settings) -> int:
    """Copy what changed in a job's lake table since the last dispersal to its targets."""
    job = settings.job(args.job)
    if not job.dispersal:
        raise ConfigError(f"jobs.{job.name}.dispersal", "the job has no dispersal targets",
                          "add a dispersal section (docs/dispersal.md)")
    names = list(args.to) if args.to else sorted(job.dispersal)
    for name in names:
        if name not in job.dispersal:
            raise ConfigError(f"jobs.{job.name}.dispersal", f"no dispersal target named "
                              f"'{name}'", f"known targets: {', '.join(sorted(job.dispersal))}")
    from python_ingest.config.dispersal import KafkaTarget

    own_broker = [t for n in names if isinstance(t := job.dispersal[n], KafkaTarget)
                  and not t.bootstrap_servers]  # topics on the project's own broker
    if settings.broker.embedded and own_broker:
        from python_ingest.kafka import broker

        if broker.start(settings):
            print(f"started the embedded broker on {settings.broker.bootstrap_servers}")
    from python_ingest.runtime.session import activate, build_session, for_job
    from python_ingest.sinks import disperse
    from python_ingest.steps.dbt import Dbt
    from python_ingest.tables.formats import name_tables
    from python_ingest.tables.lease import job_lease
    from python_ingest.tables.names import JobTables

    spark = for_job(build_session(settings), settings, job)  # the job's table format
    activate(spark)
    tables = JobTables(job.name, Dbt(settings).job_models(job.name))
    name_tables(spark, tables.all())
    with job_lease(spark, job.name):  # no merge moves the lake while it is read
        for name in names:
            result = disperse(spark, settings, job, tables, name)
            if result is None:
                print(f"{job.name} → {name}: the lake table has no merged batch yet")
            else:
                print(result.summary())
    return 0


def add_disperse_command(add: Callable[..., argparse.ArgumentParser]) -> None:
    """Register ``sluice disperse JOB [--to NAME ...]``."""
    p = add("disperse", cmd_disperse,
            "Copy what changed in a job's lake table since the last dispersal to its online "
            "stores (the job's dispersal targets: PostgreSQL tables, Kafka topics); the first "
            "dispersal copies the whole table. Prints rows upserted and deleted and the lake "
            "position from → to (docs/dispersal.md).")
    p.add_argument("job", help="job name from the config")
    p.add_argument("--to", action="append", metavar="NAME",
                   help="a dispersal target of the job (repeatable; default: all of them)")
