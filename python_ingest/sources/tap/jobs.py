"""The sluice job each tapped table becomes, for every kind of source: job ``<db>_<table>``
(PostgreSQL: ``<schema>_<table>``), topic ``<prefix>.<db>.<table>``, its registry folder and
key; and the job of the source's error records. Which tables there are and their shapes come
from the source's own catalog (kinds.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from python_ingest.config import Settings, SourceConfig
from python_ingest.sources.tap import keys, kinds
from python_ingest.sources.tap.core import registry_root, topic_for
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


def job_config(settings: Settings, source: SourceConfig, db: str, table: str,
               row_key: tuple[str, ...]) -> dict[str, Any]:
    """The ``jobs:`` entry of one tapped table keyed by ``row_key``."""
    config: dict[str, Any] = {
        "topic": topic_for(source, db, table),
        "schema_registry": _shown(settings, registry_root(settings, source) / f"{db}.{table}"),
        "value_format": "confluent-avro",
        "row_key": list(row_key),
        "ref_key": "_ref_key",
    }
    if len(row_key) > 1:  # natural columns: the tap keeps them injective
        config["row_key_encoding"] = "joined"  # as its key_of and older raw tables do
    return config


def table_jobs(settings: Settings, source: SourceConfig) -> list[TableJob]:
    """The job of every tapped table (registering each table's current schema)."""
    keys.check_setting(source)
    catalog = kinds.catalog(source)
    conn = catalog.connect(source)
    try:
        jobs = []
        for db, table in catalog.tables(conn, source):
            registry = Registry(registry_root(settings, source) / f"{db}.{table}")
            latest = registry.latest()
            shape = catalog.table_shape(conn, source, db, table, latest and latest[1])
            registry.register(shape)
            jobs.append(TableJob(job_name(db, table), f"{db}.{table}",
                                 job_config(settings, source, db, table, shape.primary_key),
                                 shape.key))
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
