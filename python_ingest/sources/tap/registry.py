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

from python_ingest.changelog.schema import KEY_SEPARATOR
from python_ingest.exceptions import IncompatibleSchemaChange
from python_ingest.sources.tap.columns import (
    OPERATION,
    ROW_ID,
    ColumnSpec,
    canonical,
    key_text,
    synthetic_spec,
)

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


PRIMARY, UNIQUE, COLUMNS, ROW, CHANGELOG = "primary", "unique", "columns", "row", "changelog"
KEY_KINDS = (PRIMARY, UNIQUE, COLUMNS, ROW, CHANGELOG)


# What the tap publishes, per source, for a change it cannot publish as it is (a value that
# cannot be encoded, a message over Kafka's size limit): topic <prefix>.__tap_errors, job
# <source>__tap_errors, lake table lake.<source>__tap_errors (docs/binlog-tap.md).
ERROR_SCHEMA: dict[str, Any] = {
    "type": "record", "name": "tap_error", "namespace": "sluice.tap",
    "doc": "a change the tap published without a value, or could not publish",
    "primary_key": ["error_id"],
    "fields": [
        {"name": "error_id", "type": "string"},
        {"name": "table_name", "type": "string"},
        {"name": "operation", "type": "string"},
        {"name": "binlog_file", "type": ["null", "string"], "default": None},
        {"name": "binlog_pos", "type": ["null", "long"], "default": None},
        {"name": "column_name", "type": ["null", "string"], "default": None},
        {"name": "error", "type": "string"},
        {"name": "value_text", "type": ["null", "string"], "default": None},
        {"name": "row_key", "type": ["null", "string"], "default": None},
        {"name": "published", "type": "boolean"},
        *ENVELOPE_FIELDS,
    ],
}


@dataclass(frozen=True)
class KeyChoice:
    """What identifies a row of a tapped table in the lake (docs/binlog-tap.md, "Keys").

    - ``primary``: the primary key; ``unique``: a UNIQUE index over NOT NULL columns
      (``index``); ``columns``: the source's ``key_columns`` setting: ``columns`` are the key.
      The key columns themselves are the job's row key, unless one of them cannot be a row key
      as it is (bytes, floats, or nullable): then ``synthetic`` and the row key is the column
      ``sluice_row_id``, the key's canonical text (one column: its text; several: a JSON list).
    - ``row``: no key: every row is its own identity, ``sluice_row_id`` = digest of the row's
      values + ``#n``, the n-th identical copy (a multiset: a delete removes one copy).
    - ``changelog``: an append-only changelog table: every change is a new lake row,
      ``sluice_row_id`` = its ref key, ``sluice_op`` = insert, update, delete or snapshot.
    """

    kind: str
    columns: tuple[str, ...] = ()
    synthetic: bool = False
    index: str | None = None
    why: str = ""

    @property
    def row_key(self) -> tuple[str, ...]:
        """The job's row key columns."""
        return (ROW_ID,) if self.synthetic or self.kind in (ROW, CHANGELOG) else self.columns

    @property
    def synthetic_columns(self) -> tuple[str, ...]:
        if self.kind == CHANGELOG:
            return (ROW_ID, OPERATION)
        return (ROW_ID,) if self.synthetic or self.kind == ROW else ()

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "columns": list(self.columns), "synthetic": self.synthetic,
                "index": self.index}

    def describe(self) -> str:
        names = f"({', '.join(self.columns)})"
        text = {PRIMARY: f"primary key {names}", UNIQUE: f"unique index {self.index} {names}",
                COLUMNS: f"key_columns {names}", ROW: "full-row identity (a multiset)",
                CHANGELOG: "append-only changelog"}[self.kind]
        return text + (f" as {ROW_ID}" if self.synthetic else "")


def old_key(schema: dict[str, Any]) -> dict[str, Any]:
    """What identifies rows in a registered version (kind, columns, synthetic), for comparing
    versions; versions before keys were chosen had a primary key."""
    key = schema.get("sluice_key") or {"kind": PRIMARY,
                                       "columns": list(schema.get("primary_key", ())),
                                       "synthetic": False}
    return {"kind": key["kind"], "columns": list(key["columns"]),
            "synthetic": bool(key.get("synthetic"))}


def registered_key(schema: dict[str, Any]) -> KeyChoice:
    """The key a registered version recorded."""
    key = old_key(schema)
    index = (schema.get("sluice_key") or {}).get("index")
    return KeyChoice(key["kind"], tuple(key["columns"]), key["synthetic"], index)


@dataclass(frozen=True)
class TableShape:
    """A table's columns (in table order) and the key that identifies its rows."""

    db: str
    table: str
    columns: tuple[ColumnSpec, ...]
    key: KeyChoice

    @property
    def qualified(self) -> str:
        return f"{self.db}.{self.table}"

    @property
    def primary_key(self) -> tuple[str, ...]:
        """The row key columns of the job (the key columns, or sluice_row_id)."""
        return self.key.row_key

    @property
    def payload(self) -> tuple[ColumnSpec, ...]:
        """Every column of an event: sluice's own (sluice_row_id ...) first, then the table's."""
        return tuple(synthetic_spec(n) for n in self.key.synthetic_columns) + self.columns

    def spec(self, name: str) -> ColumnSpec:
        return next(c for c in self.payload if c.name == name)

    def key_of(self, values: dict[str, Any]) -> str:
        """The row key of converted values (for primary/unique/columns keys)."""
        if self.key.synthetic:
            specs = [self.spec(c) for c in self.key.columns]
            texts = [canonical(s, values.get(s.name)) for s in specs]
            if len(texts) == 1 and not specs[0].nullable and texts[0] is not None:
                return texts[0]
            return json.dumps(texts, ensure_ascii=False)
        parts = [key_text(self.spec(c), values[c]) for c in self.key.columns]
        if len(parts) > 1 and any(KEY_SEPARATOR in p for p in parts):  # issue #9.7
            raise IncompatibleSchemaChange(
                f"{self.qualified}: the row key {tuple(parts)} holds '{KEY_SEPARATOR}', which "
                f"joins the columns of its composite key {self.key.columns} as registered "
                "before such keys became sluice_row_id: another row could share its lake row. "
                "Start the table over to key it by sluice_row_id: stop the tap, delete its "
                "topic, registry folder and raw/staging/lake tables, bootstrap it "
                "(docs/binlog-tap.md, \"Incompatible schema changes\")")
        return KEY_SEPARATOR.join(parts)

    def avro(self) -> dict[str, Any]:
        name = re.sub(r"[^A-Za-z0-9_]", "_", f"{self.db}_{self.table}")
        return {
            "type": "record",
            "name": name if name[0].isalpha() else f"t_{name}",
            "namespace": "sluice.tap",
            "doc": f"changelog of {self.qualified}",
            "primary_key": list(self.primary_key),
            "sluice_key": self.key.to_json(),
            "fields": [c.field() for c in self.payload] + [dict(f) for f in ENVELOPE_FIELDS],
        }

    def types(self) -> dict[str, Any]:
        return {c.name: c.avro for c in self.payload}


def _fields(schema: dict[str, Any]) -> dict[str, Any]:
    return {f["name"]: f["type"] for f in schema["fields"] if not f["name"].startswith("_")}


def widens(before: Any, after: Any) -> bool:
    """Whether a column's Avro type ``after`` holds every value of ``before`` the same way: a
    decimal of larger precision and the same scale (numeric(10,2) -> numeric(14,2)), the
    same unscaled bytes. (varchar(n) -> text, int -> bigint keep their Avro types.)"""
    return (isinstance(before, dict) and isinstance(after, dict)
            and before.get("logicalType") == after.get("logicalType") == "decimal"
            and before.get("scale") == after.get("scale")
            and int(after.get("precision", 0)) >= int(before.get("precision", 0)))


def check_compatible(old: dict[str, Any], shape: TableShape) -> None:
    """Raise IncompatibleSchemaChange unless ``shape`` only adds columns to ``old`` (or widens
    a decimal's precision)."""
    before = {name: t[1] if isinstance(t, list) else t for name, t in _fields(old).items()}
    after = shape.types()
    dropped = sorted(set(before) - set(after))
    changed = sorted(n for n in before if n in after and before[n] != after[n]
                     and not widens(before[n], after[n]))
    problems = []
    if dropped:
        problems.append(f"dropped or renamed column(s) {', '.join(dropped)}")
    if changed:
        problems.append("changed type of " + ", ".join(
            f"{n} ({json.dumps(before[n])} -> {json.dumps(after[n])})" for n in changed))
    before_key, after_key = old_key(old), old_key(shape.avro())
    if before_key != after_key:
        was = KeyChoice(before_key["kind"], tuple(before_key["columns"]),
                        bool(before_key.get("synthetic")))
        if was.kind == shape.key.kind == PRIMARY:
            problems.append(f"primary key changed from ({', '.join(was.columns)}) to "
                            f"({', '.join(shape.key.columns)})")
        else:
            problems.append(f"key changed from {was.describe()} to {shape.key.describe()}")
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
                if existing["fields"] == schema["fields"] and old_key(existing) == old_key(schema):
                    return sid
            if versions:
                check_compatible(versions[max(versions)], shape)
            sid = max(versions, default=0) + 1
            if self._create(sid, schema):
                self._cache[sid] = schema
                return sid

    def register_schema(self, schema: dict[str, Any]) -> int:
        """The id of a fixed schema (``ERROR_SCHEMA``): an equal version, else a new one."""
        while True:
            versions = self.versions()
            for sid, existing in versions.items():
                if existing == schema:
                    return sid
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
