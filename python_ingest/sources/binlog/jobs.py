"""The sluice job each tapped table becomes: its name, topic, registry folder and keys."""

from __future__ import annotations

import re
from typing import Any

from python_ingest.config import Settings, SourceConfig
from python_ingest.sources.binlog import server
from python_ingest.sources.binlog.registry import Registry
from python_ingest.sources.binlog.tap import registry_root, topic_for


def job_name(db: str, table: str) -> str:
    """The job (and raw table) name of ``db.table``: lowercase, underscores."""
    name = re.sub(r"[^a-z0-9_]", "_", f"{db}_{table}".lower())
    return name if name[0].isalpha() else f"t_{name}"


def job_configs(settings: Settings, source: SourceConfig) -> dict[str, dict[str, Any]]:
    """A ``jobs:`` entry per tapped table (registering each table's current schema)."""
    conn = server.connect(source)
    try:
        jobs = {}
        for db, table in server.tables(conn, source):
            shape = server.table_shape(conn, db, table)
            folder = registry_root(settings, source) / f"{db}.{table}"
            Registry(folder).register(shape)
            try:
                shown = str(folder.relative_to(settings.root))
            except ValueError:
                shown = str(folder)
            jobs[job_name(db, table)] = {
                "topic": topic_for(source, db, table),
                "schema_registry": shown,
                "value_format": "confluent-avro",
                "row_key": list(shape.primary_key),
                "ref_key": "_ref_key",
            }
        return jobs
    finally:
        conn.close()
