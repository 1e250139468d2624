"""The sluice job each tapped table becomes: its name, topic, registry folder and keys; and the
job of the source's error records."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from python_ingest.config import Settings, SourceConfig
from python_ingest.sources.binlog import server
from python_ingest.sources.binlog.tap_tables import registry_root, topic_for
from python_ingest.sources.tap import keys
from python_ingest.sources.tap.errors import (
    ERRORS_FOLDER,
    error_job,
    error_topic,
    register_errors,
)
from python_ingest.sources.tap.registry import KeyChoice, Registry


def job_name(db: str, table: str) -> str:
    """The job (and raw table) name of ``db.table``: lowercase, underscores."""
    name = re.sub(r"[^a-z0-9_]", "_", f"{db}_{table}".lower())
    return name if name[0].isalpha() else f"t_{name}"


@dataclass(frozen=True)
class TableJob:
    """A tapped table's job and the key it is merged by (with the reason for it)."""

    name: str
    table: str  # db.table
    config: dict[str, Any]
    key: KeyChoice


def _shown(settings: Settings, folder: Path) -> str:
    try:
        return str(folder.relative_to(settings.root))
    except ValueError:
        return str(folder)


def table_jobs(settings: Settings, source: SourceConfig) -> list[TableJob]:
    """The job of every tapped table (registering each table's current schema)."""
    keys.check_setting(source)
    conn = server.connect(source)
    try:
        jobs = []
        for db, table in server.tables(conn, source):
            folder = registry_root(settings, source) / f"{db}.{table}"
            latest = Registry(folder).latest()
            shape = server.table_shape(conn, db, table, source, latest and latest[1])
            Registry(folder).register(shape)
            config = {
                "topic": topic_for(source, db, table),
                "schema_registry": _shown(settings, folder),
                "value_format": "confluent-avro",
                "row_key": list(shape.primary_key),
                "ref_key": "_ref_key",
            }
            if len(shape.primary_key) > 1:  # natural columns: the tap keeps them injective
                config["row_key_encoding"] = "joined"  # as its key_of and older raw tables do
            jobs.append(TableJob(job_name(db, table), f"{db}.{table}", config, shape.key))
        return jobs
    finally:
        conn.close()


def job_configs(settings: Settings, source: SourceConfig) -> dict[str, dict[str, Any]]:
    """A ``jobs:`` entry per tapped table (registering each table's current schema)."""
    return {job.name: job.config for job in table_jobs(settings, source)}


def error_job_config(settings: Settings, source: SourceConfig) -> tuple[str, dict[str, Any]]:
    """The job that lands the source's error records (registering their schema)."""
    root = registry_root(settings, source)
    register_errors(root)
    return error_job(source), {
        "topic": error_topic(source),
        "schema_registry": _shown(settings, root / ERRORS_FOLDER),
        "value_format": "confluent-avro",
        "row_key": ["error_id"],
        "ref_key": "_ref_key",
    }
