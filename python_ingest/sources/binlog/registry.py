"""A tapped table's schema versions: ``<registry>/<db>.<table>/<id>.avsc`` files.

The job that ingests the table's topic points ``schema_registry`` at that folder and reads
``value_format: confluent-avro``: every message carries the id of the version it was written
with, and the highest id is the reader schema. An added column registers a new version; any
other change of the columns is incompatible and stops the tap for that table.

Versions are written with create-exclusive semantics, so a running tap and a bootstrap can
register concurrently without overwriting each other.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from python_ingest.exceptions import IncompatibleSchemaChange
from python_ingest.sources.binlog.columns import ColumnSpec

ENVELOPE_FIELDS: tuple[dict[str, Any], ...] = (
    {"name": "_ref_key", "type": "long"},
    {"name": "_changed_columns", "type": ["null", {"type": "array", "items": "string"}],
     "default": None},
    {"name": "_source", "type": "string"},
    {"name": "_event_ts", "type": "long"},
    {"name": "_is_deleted", "type": "boolean"},
    {"name": "_force_update", "type": "boolean"},
    {"name": "_data_center", "type": ["null", "string"], "default": None},
)


@dataclass(frozen=True)
class TableShape:
    """A table's columns (in table order) and primary key (in key order)."""

    db: str
    table: str
    columns: tuple[ColumnSpec, ...]
    primary_key: tuple[str, ...]

    @property
    def qualified(self) -> str:
        return f"{self.db}.{self.table}"

    def avro(self) -> dict[str, Any]:
        name = re.sub(r"[^A-Za-z0-9_]", "_", f"{self.db}_{self.table}")
        return {
            "type": "record",
            "name": name if name[0].isalpha() else f"t_{name}",
            "namespace": "sluice.tap",
            "doc": f"changelog of {self.qualified}",
            "primary_key": list(self.primary_key),
            "fields": [c.field() for c in self.columns] + [dict(f) for f in ENVELOPE_FIELDS],
        }

    def types(self) -> dict[str, Any]:
        return {c.name: c.avro for c in self.columns}


def _fields(schema: dict[str, Any]) -> dict[str, Any]:
    return {f["name"]: f["type"] for f in schema["fields"] if not f["name"].startswith("_")}


def check_compatible(old: dict[str, Any], shape: TableShape) -> None:
    """Raise IncompatibleSchemaChange unless ``shape`` only adds columns to ``old``."""
    before = {name: t[1] if isinstance(t, list) else t for name, t in _fields(old).items()}
    after = shape.types()
    dropped = sorted(set(before) - set(after))
    changed = sorted(n for n in before if n in after and before[n] != after[n])
    problems = []
    if dropped:
        problems.append(f"dropped or renamed column(s) {', '.join(dropped)}")
    if changed:
        problems.append("changed type of " + ", ".join(
            f"{n} ({json.dumps(before[n])} -> {json.dumps(after[n])})" for n in changed))
    old_key = tuple(old.get("primary_key", shape.primary_key))
    if old_key != shape.primary_key:
        problems.append(f"primary key changed from ({', '.join(old_key)}) to "
                        f"({', '.join(shape.primary_key)})")
    if problems:
        raise IncompatibleSchemaChange(
            f"table {shape.qualified}: incompatible schema change: {'; '.join(problems)}. "
            "The tap stopped this table at the first transaction with the new columns and "
            "publishes nothing more for it (other tables go on). Only added columns flow through "
            "on their own; see docs/binlog-tap.md, 'Incompatible schema changes'.")


class Registry:
    """The schema versions of one tapped table."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._cache: dict[int, dict[str, Any]] = {}

    def versions(self) -> dict[int, dict[str, Any]]:
        if self.folder.is_dir():
            for file in self.folder.glob("*.avsc"):
                if file.stem.isdigit() and int(file.stem) not in self._cache:
                    self._cache[int(file.stem)] = json.loads(file.read_text())
        return dict(self._cache)

    def latest(self) -> tuple[int, dict[str, Any]] | None:
        versions = self.versions()
        if not versions:
            return None
        top = max(versions)
        return top, versions[top]

    def register(self, shape: TableShape) -> int:
        """The id of ``shape``'s schema, registering it as a new version if needed.

        Raises IncompatibleSchemaChange when it is not the latest version plus added columns.
        """
        schema = shape.avro()
        while True:
            versions = self.versions()
            for sid, existing in sorted(versions.items(), reverse=True):
                if existing["fields"] == schema["fields"] and \
                        existing.get("primary_key") == schema["primary_key"]:
                    return sid
            if versions:
                check_compatible(versions[max(versions)], shape)
            sid = max(versions, default=0) + 1
            if self._create(sid, schema):
                self._cache[sid] = schema
                return sid

    def _create(self, sid: int, schema: dict[str, Any]) -> bool:
        """Write ``<sid>.avsc`` unless it exists (another process registered first)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".{sid}.avsc.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(schema, indent=2) + "\n")
        try:
            os.link(tmp, self.folder / f"{sid}.avsc")  # atomic, fails if the id is taken
            return True
        except FileExistsError:
            return False
        finally:
            tmp.unlink()
