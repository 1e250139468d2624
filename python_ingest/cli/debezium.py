"""The ``sluice debezium scaffold`` and ``sluice debezium status`` commands (registered by
python_ingest.cli.main)."""

from __future__ import annotations

import argparse

from python_ingest.cli.common import AddCommand, add_history_flag
from python_ingest.config import Settings


def cmd_debezium_status(settings: Settings) -> int:
    """Each connector of the Kafka Connect worker at ``kafka_connect.url`` and its tasks'
    states, over its REST API (http, or https with ``ca_file``; basic or bearer auth);
    exit 1 when one is not RUNNING."""
    from python_ingest.exceptions import ConfigError
    from python_ingest.runtime.connect_rest import ConnectRest

    if settings.kafka_connect is None:
        raise ConfigError("kafka_connect", "is not set", "kafka_connect: {url: "
                          "https://connect:8443, ca_file: ...} in sluice.yml, or "
                          "SLUICE_KAFKA_CONNECT_URL (docs/security.md)")
    client = ConnectRest.of(settings.kafka_connect)
    healthy = True
    names = client.connectors()
    for name in names:
        status = client.status(name)
        state = str((status.get("connector") or {}).get("state", "?"))
        tasks = [str(t.get("state")) for t in status.get("tasks") or []]
        healthy = healthy and state == "RUNNING" and set(tasks) == {"RUNNING"}
        print(f"{name:<32} {state:<10} tasks: {', '.join(tasks) or 'none'}")
    print(f"{len(names)} connector(s) at {client.shown_url}")
    return 0 if healthy else 1


def cmd_debezium_scaffold(args: argparse.Namespace, settings: Settings) -> int:
    """Write the jobs, converters and suites of Debezium topics (docs/debezium.md)."""
    if args.action == "status":
        return cmd_debezium_status(settings)
    if not args.topic:
        args.parser_error("debezium scaffold needs at least one topic")
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


def add_debezium_commands(add: AddCommand) -> None:
    """Register ``debezium scaffold`` on the main parser (``add`` from build_parser)."""
    dbz = add("debezium", cmd_debezium_scaffold, "Debezium topics: `sluice debezium scaffold "
              "TOPIC...` writes their jobs (source: debezium), converters and suites; "
              "`sluice debezium status` lists the connectors of kafka_connect.url.")
    dbz.add_argument("action", choices=("scaffold", "status"))
    dbz.add_argument("topic", nargs="*", help="Debezium topics (<prefix>.<db>.<table>)")
    dbz.set_defaults(parser_error=dbz.error)
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
    add_history_flag(dbz)
