"""The ``sluice debezium scaffold`` command (registered by python_ingest.cli.main)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from python_ingest.config import Settings


def cmd_debezium_scaffold(args: argparse.Namespace, settings: Settings) -> int:
    """Write the jobs, converters and suites of Debezium topics (docs/debezium.md)."""
    from python_ingest.cli.scaffolding import config_file, say_scaffolded
    from python_ingest.scaffold.debezium import scaffold
    from python_ingest.steps.dbt import project_dir

    config = config_file(args)
    project = project_dir(settings)
    result = scaffold(settings, args.topic, project, config if config.is_file() else None,
                      value_format=args.value_format, source=args.source,
                      key=args.key.split(",") if args.key else (), job_prefix=args.job_prefix,
                      history=args.history)
    say_scaffolded(result, project, config, "next: `sluice run --all` (or `sluice run <job>`)")
    return 0


def add_debezium_commands(add: Callable[[str, Callable[[argparse.Namespace, Settings], int],
                                         str], argparse.ArgumentParser]) -> None:
    """Register ``debezium scaffold`` on the main parser (``add`` from build_parser)."""
    dbz = add("debezium", cmd_debezium_scaffold, "Debezium topics: `sluice debezium scaffold "
              "TOPIC...` writes their jobs (source: debezium), converters and suites.")
    dbz.add_argument("action", choices=("scaffold",))
    dbz.add_argument("topic", nargs="+", help="Debezium topics (<prefix>.<db>.<table>)")
    dbz.add_argument("--value-format", choices=("confluent-avro", "json"),
                     default="confluent-avro",
                     help="the connector's value converter: Avro with the Schema Registry "
                          "(schema_registry: in sluice.yml; default) or JSON with its schema "
                          "envelope")
    dbz.add_argument("--source", default="debezium",
                     help="dbt source name the models go under (default: debezium)")
    dbz.add_argument("--key", help="key columns, comma-separated (default: the topic's key)")
    dbz.add_argument("--job-prefix", default="",
                     help="prefix of the job names (<prefix><db>_<table>), e.g. dbz_ beside a "
                          "tap's jobs of the same tables")
    dbz.add_argument("--history", action="store_true",
                     help="each lake model keeps a history table too (history: true; "
                          "lake.<model>__history; `sluice changes`; docs/history.md)")
