"""``sluice tap <source> --scaffold``: everything a tapped table needs to reach the lake.

For each table the source taps, it writes what docs/write-a-converter.md asks for, generic so
that no SQL is written by hand and a column added to the source later flows through:

    models/staging/<source>/_<source>__sources.yml   the raw tables (source <source>, schema raw)
    models/staging/<source>/stg_<source>__<job>.sql  {{ sluice_passthrough(source(...)) }}
    models/lake/<source>/<job>.sql                   {{ sluice_merge_all_columns(ref(...)) }}
                                                     (``--history``: with history=true)
    expectations/stg_<source>__<job>.json            not null on the row key columns

and adds the table's job (topic, schema registry, confluent-avro, row key) to the config file's
``jobs:``, with a comment saying which key it took and why (sources/tap/keys.py: the primary
key, else a UNIQUE index over NOT NULL columns, else the source's ``key_columns``, else a
full-row identity), and the same for the job ``<source>__tap_errors`` that lands the tap's error
records. Idempotent: files that exist are kept as they are (a user may have edited them), jobs
already in the config are not touched.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from python_ingest.config import Settings, SourceConfig, load_settings
from python_ingest.exceptions import SluiceError


@dataclass
class ScaffoldResult:
    """What the scaffold wrote, kept as it was, and which jobs it added to the config."""

    written: list[Path] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)
    jobs_added: list[str] = field(default_factory=list)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)  # one per tapped table
    keys: dict[str, str] = field(default_factory=dict)  # job -> which key and why
    error_job: dict[str, dict[str, Any]] = field(default_factory=dict)  # <source>__tap_errors


def dbt_name(name: str) -> str:
    """A dbt-safe identifier from a sluice source name."""
    cleaned = re.sub(r"[^a-z0-9_]", "_", name.lower())
    return cleaned if cleaned[:1].isalpha() else f"s_{cleaned}"


def staging_model(source: str, job: str) -> str:
    return f"stg_{dbt_name(source)}__{job}"


def write_new(path: Path, text: str, result: ScaffoldResult) -> None:
    """Write ``path`` unless it exists (a scaffolded file is the user's to edit): kept."""
    if path.exists():
        result.kept.append(path)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    result.written.append(path)


def lake_config(history: bool = False) -> str:
    """The lake model's config line; ``history``: with its history table (SCD type 2, every
    change a version: ``lake.<model>__history``, docs/history.md)."""
    return ("{{ config(materialized='lake_merge'" + (", history=true" if history else "")
            + ") }}\n")


def sources_yml(path: Path, name: str, description: str, tables: dict[str, str],
                written_by: str, result: ScaffoldResult) -> None:
    """The dbt source ``name`` with one raw table per job (``tables``: job -> its
    description); adds missing tables to an existing file, never removes one."""
    data: dict[str, Any] = {"version": 2, "sources": []}
    if path.exists():
        data = yaml.safe_load(path.read_text()) or data
    entry = next((s for s in data.setdefault("sources", []) if s.get("name") == name), None)
    if entry is None:
        entry = {"name": name, "description": description, "schema": "raw", "tables": []}
        data["sources"].append(entry)
    present = {t.get("name") for t in entry.setdefault("tables", [])}
    missing = [job for job in tables if job not in present]
    if not missing:
        result.kept.append(path)
        return
    for job in missing:
        entry["tables"].append({
            "name": job, "description": tables[job],
            "columns": [{"name": "_row_key", "data_tests": ["not_null"]},
                        {"name": "_ref_key", "data_tests": ["not_null"]}]})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# Written by `{written_by}` (tables are added, never removed).\n"
                    + yaml.safe_dump(data, sort_keys=False))
    result.written.append(path)


def _sources_yml(path: Path, source: str, db_tables: dict[str, str],
                 result: ScaffoldResult) -> None:
    """The dbt source <source> with one table per job; adds missing tables to an existing one."""
    sources_yml(path, dbt_name(source), f"Changelog events of the tables sluice's tap reads "
                f"from source '{source}', one raw table per job.",
                {job: f"Changelog of {table} (tap)." for job, table in db_tables.items()},
                f"sluice tap {source} --scaffold", result)


def _suite(model: str, db_table: str, key: list[str]) -> str:
    expectations = [{"type": "expect_column_values_to_not_be_null", "kwargs": {"column": c}}
                    for c in [*key, "_row_key", "_ref_key"]]
    return json.dumps({"name": model, "meta": {"notes": f"Minimal suite of {db_table} (tap): "
                       "the row key is never null. Add the table's own rules here."},
                       "expectations": expectations}, indent=2) + "\n"


def _job_lines(jobs: dict[str, dict[str, Any]], notes: dict[str, str]) -> list[str]:
    lines = []
    for name, job in jobs.items():
        if name in notes:
            lines.append(f"# {name}: {notes[name]}")
        lines += yaml.safe_dump({name: job}, sort_keys=False).splitlines()
    return lines


def add_jobs_to_config(config: Path, jobs: dict[str, dict[str, Any]],
                       notes: dict[str, str] | None = None) -> list[str]:
    """Add the jobs missing from the config file's ``jobs:`` (text edit: comments stay), each
    after a comment line with its note (``notes``: job -> text), if any."""
    current = (yaml.safe_load(config.read_text()) or {}).get("jobs") or {}
    missing = {n: j for n, j in jobs.items() if n not in current}
    if not missing:
        return []
    text = config.read_text()
    lines = text.splitlines()
    top = [i for i, line in enumerate(lines) if re.match(r"jobs:\s*(\{\}\s*)?(#.*)?$", line)]
    block = _job_lines(missing, notes or {})
    if not top:
        lines += ["jobs:", *("  " + line for line in block)]
    else:
        at = top[0]
        if "{}" in lines[at]:
            lines[at] = "jobs:"
        following = [line for line in lines[at + 1:] if line.strip()
                     and not line.lstrip().startswith("#")]
        indent = "  "
        if following and following[0][:1] == " ":
            indent = following[0][:len(following[0]) - len(following[0].lstrip())]
        lines[at + 1:at + 1] = [indent + line for line in block]
    config.write_text("\n".join(lines) + "\n")
    found = (yaml.safe_load(config.read_text()) or {}).get("jobs") or {}
    if any(found.get(n) != j for n, j in missing.items()):
        config.write_text(text)
        raise SluiceError(f"could not add the jobs to {config} (unusual layout of its jobs:); "
                          "add them by hand from `sluice tap <source> --print-jobs`")
    load_settings(config, env={})  # still a valid config
    return list(missing)


def scaffold(settings: Settings, source: SourceConfig, project: Path,
             config: Path | None, say: Callable[[str], None] | None = print,
             history: bool = False) -> ScaffoldResult:
    """Write the dbt models and suites of every tapped table into ``project``; add its jobs.
    ``say`` hears which key each table got and why; ``history`` turns each lake model's
    history table on."""
    from python_ingest.sources.tap.jobs import error_job_config, table_jobs

    planned = table_jobs(settings, source)
    result = ScaffoldResult(jobs={j.name: j.config for j in planned},
                            keys={j.name: f"row key {j.key.describe()}: {j.key.why}"
                                  for j in planned})
    error_name, error_config = error_job_config(settings, source)
    result.error_job = {error_name: error_config}
    tables = {j.name: j.table for j in planned}
    for planned_job in planned:
        if say is not None:
            say(f"{planned_job.table} -> job {planned_job.name}, "
                f"{result.keys[planned_job.name]}")
    tables[error_name] = f"the tap's error records of source {source.name}"
    name = dbt_name(source.name)
    staging_dir = project / "models" / "staging" / name
    _sources_yml(staging_dir / f"_{name}__sources.yml", source.name, tables, result)
    for job, db_table in tables.items():
        model = staging_model(source.name, job)
        write_new(staging_dir / f"{model}.sql",
               f"-- Converter of {db_table} (tap): every column as the source has it, new "
               "columns included.\n-- Written by `sluice tap --scaffold`; edit freely "
               "(docs/write-a-converter.md).\n"
               f"{{{{ config(materialized='incremental') }}}}\n\n"
               f"{{{{ sluice_passthrough(source('{name}', '{job}')) }}}}\n", result)
        write_new(project / "models" / "lake" / name / f"{job}.sql",
               f"-- The current state of {db_table}: every column of {model}'s valid rows "
               "(read at run time),\n-- merged batch by batch. Written by `sluice tap "
               "--scaffold`.\n"
               + lake_config(history) + "\n"
               f"{{{{ sluice_merge_all_columns(ref('{model}')) }}}}\n", result)
        key = (result.jobs.get(job) or result.error_job[job])["row_key"]
        write_new(project / "expectations" / f"{model}.json", _suite(model, db_table, list(key)),
               result)
    if config is not None:
        notes = dict(result.keys)
        notes[error_name] = ("the tap's error records (values it could not publish): "
                             "docs/binlog-tap.md, 'Values that cannot be published'")
        result.jobs_added = add_jobs_to_config(config, {**result.jobs, **result.error_job}, notes)
    return result
