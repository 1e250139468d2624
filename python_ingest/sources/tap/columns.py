"""The column vocabulary every tap shares: a column's spec (its name, its kind, its Avro type),
the kinds and their Avro types, the columns sluice adds (``sluice_row_id``, ``sluice_op``), and
a value's text forms in keys and row identities. Each database maps its own types to these
kinds (binlog/columns.py for MySQL/MariaDB, postgres/columns.py for PostgreSQL; docs/types.md
has the user's tables); keys.py and registry.py work on the kinds alone.

Every column is nullable in Avro (``["null", T]``, default null), so an added column is always
a compatible change for readers of older versions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from python_ingest.exceptions import UnsupportedColumn
from python_ingest.sources.tap.values import date_text, float32_text, timestamp_text

MAX_SPARK_PRECISION = 38
ROW_ID = "sluice_row_id"  # the key column of tables keyed by a synthetic identity
OPERATION = "sluice_op"  # the change's kind in an append-only changelog table
SYNTHETIC = (ROW_ID, OPERATION)
_AVRO_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


# ---- column specs ----------------------------------------------------------------------------

@dataclass(frozen=True)
class ColumnSpec:
    """One column: its name, how its values convert, and its Avro type."""

    name: str
    kind: str
    avro: Any
    fsp: int = 0
    members: tuple[str, ...] = ()  # ENUM / SET members, in definition order
    nullable: bool = True
    width: int = 0  # BINARY(n): n
    charset: str = ""  # text columns: the server's charset name
    scale: int = 0  # DECIMAL

    def field(self) -> dict[str, Any]:
        return {"name": self.name, "type": ["null", self.avro], "default": None}


def _decimal(precision: int, scale: int) -> dict[str, Any]:
    return {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}


_TIMESTAMP = {"type": "long", "logicalType": "timestamp-micros"}
_AVRO: dict[str, Any] = {
    "long": "long", "bit": "long", "float": "float", "double": "double", "bool": "boolean",
    "ulong": _decimal(20, 0), "bit64": _decimal(20, 0), "bigdecimal": "string",
    "time": "string", "string": "string", "json": "string", "set": "string", "enum": "string",
    "uuid": "string", "inet4": "string", "inet6": "string", "bytes": "bytes", "fixed": "bytes",
    "geometry": "bytes", "timestamp": _TIMESTAMP, "datetime": _TIMESTAMP,
    "date": {"type": "int", "logicalType": "date"},
}
TEMPORAL = ("date", "datetime", "timestamp")


def make_spec(name: str, kind: str, precision: int = 0, scale: int = 0, fsp: int = 0,
              members: tuple[str, ...] = (), nullable: bool = True, width: int = 0,
              charset: str = "") -> ColumnSpec:
    if not _AVRO_NAME.match(name):
        raise UnsupportedColumn(
            f"column '{name}' is not a valid changelog column name (letters, digits and "
            "underscores, not starting with '_', which sluice reserves for its own columns); "
            "rename it or exclude the table")
    if name in SYNTHETIC:
        raise UnsupportedColumn(f"column '{name}' has the name of a column sluice adds to "
                                "tables without a key; rename it or exclude the table")
    if kind == "decimal":
        avro: Any = _decimal(precision, scale)
    elif kind in _AVRO:
        avro = _AVRO[kind]
    else:
        raise UnsupportedColumn(f"column '{name}': unknown kind {kind}")
    return ColumnSpec(name, kind, avro, fsp, members, nullable, width, charset, scale)


def synthetic_spec(name: str) -> ColumnSpec:
    """The spec of a column sluice adds (``sluice_row_id``, ``sluice_op``): a string."""
    return ColumnSpec(name, "string", "string")


# ---- text forms ------------------------------------------------------------------------------

NATURAL_KEY_KINDS = ("long", "ulong", "bit", "bit64", "decimal", "bigdecimal", "string", "enum",
                     "set", "json", "time", "uuid", "inet4", "inet6", "bool", *TEMPORAL)


def key_text(spec: ColumnSpec, value: Any) -> str:
    """A key column's Avro value as the changelog decoder renders it in ``_row_key`` (Arrow's
    cast to string) for the kinds in NATURAL_KEY_KINDS."""
    if spec.kind == "date":
        return date_text(value)
    if spec.kind in ("datetime", "timestamp"):
        return timestamp_text(value) + "Z"
    if spec.kind == "bool":
        return "true" if value else "false"
    if isinstance(value, Decimal):
        return format(value, "f")
    return str(value)


def canonical(spec: ColumnSpec, value: Any) -> str | None:
    """An Avro value of ``spec``'s column as canonical text: hex for bytes, full-width
    fractions for times (``YYYY-MM-DD HH:MM:SS.ffffff``), the shortest exact text of a float.
    Used for synthetic keys and row identities."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex()
    if spec.kind == "date":
        return date_text(value)
    if spec.kind in ("datetime", "timestamp"):
        return timestamp_text(value)
    if spec.kind == "float":
        return float32_text(value)
    if spec.kind == "double":
        return repr(float(value))
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal):
        return format(value, "f")
    return str(value)
