"""The sluice job each tapped PostgreSQL table becomes (as binlog/jobs.py for MariaDB): job
``<schema>_<table>``, topic ``<prefix>.<schema>.<table>``, its registry folder and key."""

from __future__ import annotations

from typing import Any

from python_ingest.config import Settings, SourceConfig
from python_ingest.sources.binlog.jobs import TableJob, job_name
from python_ingest.sources.binlog.tap import registry_root
from python_ingest.sources.postgres import server
from python_ingest.sources.postgres.shapes import table_shape
from python_ingest.sources.postgres.tap import topic_for
from python_ingest.sources.tap import keys
from python_ingest.sources.tap.registry import Registry


def job_config(settings: Settings, source: SourceConfig, schema: str, table: str,
               row_key: tuple[str, ...]) -> dict[str, Any]:
    folder = registry_root(settings, source) / f"{schema}.{table}"
    try:
        shown = str(folder.relative_to(settings.root))
    except ValueError:
        shown = str(folder)
    config: dict[str, Any] = {
        "topic": topic_for(source, schema, table),
        "schema_registry": shown,
        "value_format": "confluent-avro",
        "row_key": list(row_key),
        "ref_key": "_ref_key",
    }
    if len(row_key) > 1:  # natural columns: kept injective by the tap (binlog/jobs.py)
        config["row_key_encoding"] = "joined"
    return config


def table_jobs(settings: Settings, source: SourceConfig) -> list[TableJob]:
    """The job of every tapped table (registering each table's current schema)."""
    keys.check_setting(source)
    conn = server.connect(source)
    try:
        jobs = []
        for schema, table in server.tables(conn, source):
            registry = Registry(registry_root(settings, source) / f"{schema}.{table}")
            latest = registry.latest()
            shape = table_shape(conn, source, schema, table, latest and latest[1]).shape
            registry.register(shape)
            jobs.append(TableJob(job_name(schema, table), f"{schema}.{table}",
                                 job_config(settings, source, schema, table, shape.primary_key),
                                 shape.key))
        return jobs
    finally:
        conn.close()


def job_configs(settings: Settings, source: SourceConfig) -> dict[str, dict[str, Any]]:
    """A ``jobs:`` entry per tapped table."""
    return {job.name: job.config for job in table_jobs(settings, source)}
