"""The job's flat reader schema for Debezium change events, from their envelope's schema.

A Debezium envelope's ``after`` (and ``before``) field is the row's record; ``row_schema``
finds it, ``flat_schema`` turns it into the job's flat reader schema (each column in its lake
type, debezium_types.py, plus the changelog fields ``flatten`` fills) and the
``DebeziumFormat`` saying how events become such records. ``strip_logical`` gives the schema
Avro envelopes are read with; ``check_writer`` stops a batch when a version registered while
it ran adds columns that reading would drop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from python_ingest.changelog.debezium_types import column_type, non_null
from python_ingest.exceptions import ConfigError, ReadError

REF_KEY = "_ref_key"
_ENVELOPE_FIELDS = [
    {"name": REF_KEY, "type": "long"},
    {"name": "_changed_columns", "type": ["null", {"type": "array", "items": "string"}],
     "default": None},
    {"name": "_source", "type": ["null", "string"], "default": None},
    {"name": "_event_ts", "type": ["null", "long"], "default": None},
    {"name": "_is_deleted", "type": "boolean", "default": False},
]


@dataclass(frozen=True)
class DebeziumFormat:
    """How a job's Debezium events become flat records (pickled into Spark tasks)."""

    encoding: str  # avro | json
    conversions: tuple[tuple[str, str], ...]  # (column, conversion) for columns that need one
    columns: tuple[str, ...]  # every row column, in the reader schema's order
    scales: tuple[tuple[str, int], ...] = ()  # decimal columns' scales (JSON's base64 bytes)
    ordering: str = "position"
    binary: tuple[str, ...] = ()  # columns whose values are bytes (TOAST placeholder's form)
    job: str = ""
    known: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "known", frozenset(self.columns))


def row_schema(envelope: dict[str, Any]) -> dict[str, Any]:
    """The row's record schema inside a Debezium envelope (its ``after`` field's type)."""
    fields = {f["name"]: f["type"] for f in envelope.get("fields", [])}
    if "op" not in fields or "after" not in fields:
        raise ConfigError("schema", f"{envelope.get('name', 'the schema')} is not a Debezium "
                          "change event envelope (no 'op' and 'after' fields)")
    found = non_null(fields["after"])
    if isinstance(found, str):  # a reference to the record ``before`` defines
        found = _named(envelope, envelope.get("namespace"), found)
    if not isinstance(found, dict) or found.get("type") != "record":
        raise ConfigError("schema", f"the 'after' field of {envelope.get('name')} is not a record")
    return dict(found)


def _named(schema: Any, namespace: str | None, wanted: str) -> dict[str, Any] | None:
    """The record named ``wanted`` (full or short name) defined anywhere inside ``schema``."""
    if isinstance(schema, list):
        return next(filter(None, (_named(t, namespace, wanted) for t in schema)), None)
    if not isinstance(schema, dict):
        return None
    if schema.get("type") == "record":
        space = schema.get("namespace", namespace)
        name = schema.get("name", "")
        full = name if "." in name or not space else f"{space}.{name}"
        if wanted in (full, name) or (space and f"{space}.{wanted}" == full):
            return schema
        return next(filter(None, (_named(f["type"], space, wanted)
                                  for f in schema.get("fields", []))), None)
    return _named(schema.get("type"), namespace, wanted) if isinstance(
        schema.get("type"), dict | list) else None


def flat_schema(row: dict[str, Any], job: str, encoding: str,
                ordering: str = "position") -> tuple[dict[str, Any], DebeziumFormat]:
    """The job's flat reader schema for a Debezium row record, and how to flatten events."""
    fields, conversions, scales, binary = [], [], [], []
    for f in row.get("fields", []):
        flat, conversion, scale = column_type(f["name"], f["type"], job)
        fields.append({"name": f["name"], "type": ["null", flat], "default": None})
        if flat == "bytes":
            binary.append(f["name"])
            if not conversion and encoding == "json":  # JsonConverter: base64 text
                conversion = "base64"
        if conversion:
            conversions.append((f["name"], conversion))
        if scale is not None:
            scales.append((f["name"], scale))
    schema = {"type": "record", "name": str(row.get("name", "Value")).replace(".", "_"),
              "fields": fields + _ENVELOPE_FIELDS}
    return schema, DebeziumFormat(encoding, tuple(conversions),
                                  tuple(f["name"] for f in row.get("fields", [])),
                                  tuple(scales), ordering, tuple(binary), job)


def strip_logical(avro_type: Any) -> Any:
    """An envelope schema with every logical type but decimal plain (values stay the integers
    and texts Debezium wrote; ``flatten`` and the chunk's conversion handle them)."""
    if isinstance(avro_type, list):
        return [strip_logical(t) for t in avro_type]
    if isinstance(avro_type, dict):
        out = {k: v for k, v in avro_type.items()
               if k != "logicalType" or v == "decimal"}
        if out.get("logicalType") == "decimal" and out.get("scale", 0) > out.get("precision", 0):
            out["precision"] = out["scale"]  # numeric(3,5): fastavro needs scale <= precision
        if out.get("type") == "record":
            out["fields"] = [{**f, "type": strip_logical(f["type"])} for f in out["fields"]]
        elif isinstance(out.get("type"), dict | list):
            out["type"] = strip_logical(out["type"])
        return out
    return avro_type


def check_writer(sid: int, writer: dict[str, Any], reader: dict[str, Any],
                 known: Any, fmt: DebeziumFormat) -> None:
    """Stop the batch when a version registered after it began (an id above every ``known``
    one) adds row columns the batch's reader envelope lacks: resolving to the reader would
    drop them silently. The next run reads with that version (the subject's newest)."""
    if any(sid <= other for other in known):
        return
    try:
        have = {f["name"] for f in row_schema(reader).get("fields", [])}
        added = [f["name"] for f in row_schema(writer).get("fields", [])
                 if f["name"] not in have]
    except ConfigError:  # not an envelope: its messages become error rows when decoded
        return
    if added:
        raise ReadError(
            f"job {fmt.job}: schema id {sid}, registered while this batch ran, adds column(s) "
            f"{', '.join(added)} (added at the source): run the job again, its next batch "
            "reads with that version (the raw and lake tables gain the columns); nothing of "
            "this batch was committed")
