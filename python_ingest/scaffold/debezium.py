"""``sluice debezium scaffold TOPIC...``: what Debezium topics need to reach the lake.

The counterpart of ``sluice tap --scaffold`` (scaffold/dbt.py) for topics a Debezium deployment
writes. For each topic (sources/debezium/topics.py reads its row schema and key) it writes

    models/staging/<source>/_<source>__sources.yml   the raw tables (schema raw)
    models/staging/<source>/stg_<source>__<job>.sql  {{ sluice_passthrough(source(...)) }}
    models/lake/<source>/<job>.sql                   {{ sluice_merge_all_columns(ref(...)) }}
    expectations/stg_<source>__<job>.json            not null on the row key columns
    schemas/debezium/<job>.avsc                      the row's schema (JSON topics only)

and adds a ``source: debezium`` job per topic to the config file. Idempotent: existing files
are kept as they are, jobs already in the config are not touched; a JSON job's row schema is
the exception: columns its topic's events carry that the ``.avsc`` lacks (added at the source)
are appended to it. (A run follows such columns by itself when the events carry their schema:
sources/debezium/follow.py; the scaffold is then needed only for events without one.)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from python_ingest.config import Settings
from python_ingest.exceptions import ConfigError
from python_ingest.scaffold.dbt import (
    ScaffoldResult,
    add_jobs_to_config,
    dbt_name,
    lake_config,
    sources_yml,
    staging_model,
    write_new,
)
from python_ingest.sources.debezium.topics import (
    DebeziumTopic,
    from_messages,
    from_registry,
    job_name,
    merged_row,
)

SCHEMAS = Path("schemas") / "debezium"


def _row_schema(path: Path, row: dict[str, Any], result: ScaffoldResult) -> list[str]:
    """Write a JSON job's row schema, or add the columns ``row`` has that it lacks (never
    removes or changes one). The columns added."""
    if not path.exists():
        write_new(path, json.dumps(row, indent=2) + "\n", result)
        return []
    current = json.loads(path.read_text())
    merged = merged_row([current, row])
    added = [f["name"] for f in merged["fields"][len(current.get("fields", [])):]]
    if not added:
        result.kept.append(path)
        return []
    path.write_text(json.dumps(merged, indent=2) + "\n")
    result.written.append(path)
    return added


def describe(settings: Settings, topics: Sequence[str], value_format: str,
             key: Sequence[str] = ()) -> list[DebeziumTopic]:
    """Each topic's row schema and key (from the registry, or from its first JSON event)."""
    found = []
    for topic in topics:
        if value_format == "confluent-avro":
            if settings.schema_registry is None:
                raise ConfigError("schema_registry", "Avro Debezium topics need the Schema "
                                  "Registry", "set schema_registry: {url: ...} in sluice.yml")
            described = from_registry(topic, settings.schema_registry, key)
        else:
            described = from_messages(topic, settings.broker.bootstrap_servers, key)
        found.append(described)
    return found


def _sources_yml(path: Path, source: str, jobs: dict[str, str], result: ScaffoldResult) -> None:
    sources_yml(path, source, "Debezium change events, one raw table per topic (sluice "
                "debezium scaffold).",
                {job: f"Debezium change events of topic {topic}." for job, topic in jobs.items()},
                "sluice debezium scaffold", result)


def scaffold(settings: Settings, topics: Sequence[str], project: Path, config: Path | None,
             value_format: str = "confluent-avro", source: str = "debezium",
             key: Sequence[str] = (), say: Callable[[str], None] | None = print,
             job_prefix: str = "", history: bool = False) -> ScaffoldResult:
    """Write the models, suites (and JSON topics' row schemas) of ``topics``; add their jobs
    (named ``<job_prefix><db>_<table>``: a prefix keeps them apart from a tap's jobs of the
    same tables); ``history`` turns each lake model's history table on."""
    name = dbt_name(source)
    result = ScaffoldResult()
    for described in describe(settings, topics, value_format, key):
        job = job_prefix + job_name(described.topic)
        columns = {f["name"] for f in described.row.get("fields", [])}
        missing = [c for c in described.key if c not in columns]
        if missing or not described.key:
            raise ConfigError("--key", f"key column(s) {missing or '(none)'} not in the row "
                              f"of {described.topic}", f"its columns: {sorted(columns)}")
        # confluent-kafka reads every codec a Connect worker may compress with (lz4, zstd)
        entry: dict[str, Any] = {"source": "debezium", "topic": described.topic,
                                 "value_format": value_format, "row_key": list(described.key),
                                 "reader": "confluent-kafka"}
        if value_format == "json":
            existing = settings.jobs.get(job)
            relative = Path(existing.schema) if existing is not None and existing.schema \
                else SCHEMAS / f"{job}.avsc"
            added = _row_schema(settings.root / relative, described.row, result)
            if added and say is not None:
                say(f"{relative}: added column(s) {', '.join(added)} (new in {described.topic})")
            entry["schema"] = str(relative)
        result.jobs[job] = entry
        result.keys[job] = f"row key ({', '.join(described.key)}): the topic's message key"
        if say is not None:
            say(f"{described.topic} -> job {job}, {result.keys[job]}")
    staging_dir = project / "models" / "staging" / name
    _sources_yml(staging_dir / f"_{name}__sources.yml", name,
                 {j: e["topic"] for j, e in result.jobs.items()}, result)
    for job, entry in result.jobs.items():
        model = staging_model(source, job)
        write_new(staging_dir / f"{model}.sql",
               f"-- Converter of {entry['topic']} (Debezium): every column as the source has "
               "it, new columns included.\n-- Written by `sluice debezium scaffold`; edit "
               "freely (docs/write-a-converter.md).\n"
               "{{ config(materialized='incremental') }}\n\n"
               f"{{{{ sluice_passthrough(source('{name}', '{job}')) }}}}\n", result)
        write_new(project / "models" / "lake" / name / f"{job}.sql",
               f"-- The current state of {entry['topic']}'s table: every column of {model}'s "
               "valid rows,\n-- merged batch by batch. Written by `sluice debezium scaffold`.\n"
               + lake_config(history) + "\n"
               f"{{{{ sluice_merge_all_columns(ref('{model}')) }}}}\n", result)
        expectations = [{"type": "expect_column_values_to_not_be_null", "kwargs": {"column": c}}
                        for c in [*entry["row_key"], "_row_key", "_ref_key"]]
        write_new(project / "expectations" / f"{model}.json",
               json.dumps({"name": model, "meta": {"notes": f"Minimal suite of "
                           f"{entry['topic']} (Debezium): the row key is never null. Add the "
                           "table's own rules here."}, "expectations": expectations},
                          indent=2) + "\n", result)
    if config is not None:
        result.jobs_added = add_jobs_to_config(config, result.jobs, result.keys)
    return result
