"""Debezium JSON events read by the schema each carries, and what a job follows of it.

A JsonConverter message with schemas (``{"schema": ..., "payload": ...}``) carries the
Connect type of every column of its row. A table's messages share a few such schemas (one per
version of the table), so ``message_format`` reads each distinct one once per task and
compares it, column by column, with the job's reader schema (its ``.avsc``; the lake type of
each column as ``kind`` names it):

- the same lake type, or one the column had before the job followed a widening (its
  ``sluice.older_types``, or between one and the column's type): the message is read with its
  OWN conversions (its decimal scale,
  its timestamp unit: a Connect ``Timestamp`` in milliseconds read into a column that became
  ``MicroTimestamp``), so messages older than a change the job followed land right;
- a column the job lacks, or a wider type (a decimal with more digits before the point and
  the same scale, float to double, a timestamp in milliseconds to one in microseconds):
  a ``ReadError`` ending in ``FOLLOW`` and the row's new Avro fields (one line of JSON): the
  ingest step (sources/debezium/follow.py) widens the job's ``.avsc`` with them, the raw table
  gains or widens the columns, and the batch is read again, in the same run;
- anything else stops the batch naming the column: a decimal scale change (values would be
  read at the wrong scale), a narrowing, another kind of type (text to number ...). A
  narrowing or a scale decrease at the source may have changed stored values without a
  change event (MariaDB rewrites the rows in the ALTER), which no lake can follow.

``connect_to_avro`` turns a Connect schema into the Avro form Confluent's AvroConverter writes
(what ``sluice debezium scaffold`` writes into the ``.avsc``, and what a followed column adds).
"""

from __future__ import annotations

import json
from typing import Any

from python_ingest.changelog.debezium_schema import DebeziumFormat, flat_schema
from python_ingest.changelog.debezium_types import non_null
from python_ingest.exceptions import DecodeError, ReadError, SluiceError

FOLLOW = " follow="  # ends a ReadError the ingest step follows: the new fields as JSON
OLDER = "sluice.older_types"  # a row field's lake types before the job followed a widening
# Connect's schema types as JsonConverter names them (Kafka's JsonSchema: int8 .. int64,
# float, double, boolean, string, bytes, array, map, struct); float32/float64 are
# Connect's Schema.Type names, accepted as well
_AVRO = {"int8": "int", "int16": "int", "int32": "int", "int64": "long", "float": "float",
         "double": "double", "float32": "float", "float64": "double", "boolean": "boolean",
         "string": "string", "bytes": "bytes"}
_WIDER = {("float", "double"), ("timestamp-millis", "timestamp-micros")}


def connect_to_avro(schema: dict[str, Any], name: str = "Value") -> Any:
    """A Connect schema (JsonConverter's form) as the AvroConverter writes it."""
    kind = schema.get("type")
    logical = schema.get("name")
    if kind == "struct":
        fields = []
        for field in schema.get("fields", []):
            avro = connect_to_avro(field, field["field"])
            if field.get("optional", True):
                fields.append({"name": field["field"], "type": ["null", avro], "default": None})
            else:
                fields.append({"name": field["field"], "type": avro})
        record: dict[str, Any] = {"type": "record",
                                  "name": (logical or name).rsplit(".", 1)[-1], "fields": fields}
        if logical:
            record["connect.name"] = logical
        return record
    if kind == "array":
        return {"type": "array", "items": connect_to_avro(schema["items"], name)}
    if kind not in _AVRO:
        raise SluiceError(f"Connect type {kind!r} of field '{name}' has no Avro form sluice reads")
    out: dict[str, Any] = {"type": _AVRO[kind]}
    if logical:
        out["connect.name"] = logical
    params = schema.get("parameters")
    if params:
        out["connect.parameters"] = params
    if logical == "org.apache.kafka.connect.data.Decimal" and params:
        out["logicalType"] = "decimal"
        out["scale"] = int(params.get("scale", 0))
        if "connect.decimal.precision" in params:
            # numeric(3,5) (scale above precision): decimal(5,5), as the tap lands it
            out["precision"] = max(int(params["connect.decimal.precision"]), out["scale"])
    return out


def kind(flat: Any) -> str:
    """A flat column type's name as the comparisons here (and ``sluice.older_types``) spell
    it: ``long``, ``string``, ``double``, ``bytes``, ``date``, ``timestamp-micros``,
    ``decimal(10,2)`` ..."""
    flat = non_null(flat)
    if isinstance(flat, dict):
        logical = flat.get("logicalType")
        if logical == "decimal":
            return f"decimal({flat['precision']},{flat.get('scale', 0)})"
        return str(logical or flat.get("type"))
    return str(flat)


def _decimal(name: str) -> tuple[int, int] | None:
    if not name.startswith("decimal("):
        return None
    precision, scale = name[len("decimal("):-1].split(",")
    return int(precision), int(scale)


def widens(old: str, new: str) -> bool:
    """Whether a column of lake type ``old`` holds every value of ``new``'s widened form
    (``new`` wider: more digits before the point at the same scale, float to double, a
    timestamp in milliseconds to microseconds)."""
    if (old, new) in _WIDER:
        return True
    was, now = _decimal(old), _decimal(new)
    return bool(was and now and was[1] == now[1] and now[0] > was[0])


def _older(now: str, was: str, older: Any) -> bool:
    """Whether a message's type ``now``, narrower than the column's ``was``, is one the
    column had before the job widened it: one of its ``older`` types or between one and
    ``was`` (widenings followed in another order than they happened, across partitions)."""
    return widens(now, was) and any(o == now or widens(o, now) for o in older)


def _why(old: str, new: str) -> str:
    was, now = _decimal(old), _decimal(new)
    if was and now and was[1] != now[1]:
        return ("a decimal scale change: sluice would read the values at the wrong scale, "
                "and the source's ALTER may have rounded stored values without change events")
    if widens(new, old):
        return ("a narrowing: the source's ALTER may have changed stored values without "
                "change events")
    return "an incompatible type change"


def row_of(schema: dict[str, Any]) -> dict[str, Any]:
    """The row's Avro record from a JsonConverter message's ``schema`` (its ``after``)."""
    after = next((f for f in schema.get("fields", []) if f.get("field") == "after"), None)
    if after is None:
        raise DecodeError("not a Debezium change event: its schema has no 'after' field")
    return dict(connect_to_avro(after))


def message_format(schema: dict[str, Any], fmt: DebeziumFormat,
                   reader: dict[str, Any]) -> DebeziumFormat:
    """How to flatten the messages carrying ``schema`` (the envelope's Connect schema) into
    the job's record (``fmt``, its flat ``reader`` schema); raises ReadError when the job must
    follow it (``FOLLOW``) or cannot (naming the column)."""
    try:
        row = row_of(schema)
        flat, own = flat_schema(row, fmt.job, "json", fmt.ordering)
    except SluiceError as exc:  # a column of a type sluice does not read
        raise ReadError(f"job {fmt.job}: a Debezium event's schema cannot be read: {exc}; "
                        "nothing of this batch was committed") from None
    job_fields = {f["name"]: f for f in reader["fields"]}
    row_fields = {f["name"]: f for f in row.get("fields", [])}
    types = {f["name"]: kind(f["type"]) for f in flat["fields"]}
    conversions = dict(own.conversions)
    new: list[str] = []
    follow: list[dict[str, Any]] = []
    out: list[tuple[str, str]] = []
    for name in own.columns:
        now = types[name]
        if name not in fmt.known:
            new.append(name)
            follow.append(row_fields[name])
            continue
        field = job_fields[name]
        was = kind(field["type"])
        if now == was or _older(now, was, field.get(OLDER, ())):
            conversion = conversions.get(name, "")
            if was == "timestamp-micros" and now == "timestamp-millis":
                conversion = "ms_to_us"
            if conversion:
                out.append((name, conversion))
        elif widens(was, now):
            follow.append(row_fields[name])
        else:
            hint = (f"; or, when no stored value changed, add \"{now}\" to the column's "
                    f"\"{OLDER}\" list in the job's .avsc to read such events into the wider "
                    "column") if widens(now, was) else ""
            raise ReadError(
                f"job {fmt.job}: column {name} is {now} in a Debezium event but {was} in the "
                f"job's schema ({_why(was, now)}): sluice cannot follow this change, nothing "
                "of this batch was committed. Start the job over from a new snapshot of the "
                "table (drop its tables, re-snapshot into a new topic, `sluice debezium "
                f"scaffold` it){hint} (docs/debezium.md)")
    if follow:
        widened = [f["name"] for f in follow if f["name"] not in new]
        what = ", ".join(filter(None, [
            f"carry column(s) {', '.join(new)} that the job's schema lacks" if new else "",
            f"widen column(s) {', '.join(widened)}" if widened else ""]))
        raise ReadError(
            f"job {fmt.job}: Debezium events {what} (changed at the source): a run follows "
            "such a change by itself (it widens the job's .avsc and reads the batch again); "
            "nothing of this batch was committed." + FOLLOW
            + json.dumps(follow, separators=(",", ":")))
    scales = tuple((n, s) for n, s in own.scales if n in fmt.known)
    return DebeziumFormat("json", tuple(out), fmt.columns, scales, fmt.ordering, fmt.binary,
                          fmt.job)


def keep_older(reader: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """The job's flat ``reader`` schema with each row field's ``sluice.older_types``."""
    older = {f["name"]: f[OLDER] for f in row.get("fields", []) if f.get(OLDER)}
    if not older:
        return reader
    return {**reader, "fields": [{**f, OLDER: older[f["name"]]} if f["name"] in older else f
                                 for f in reader["fields"]]}


def followed(text: str) -> list[dict[str, Any]] | None:
    """The row fields a ``FOLLOW`` error names (None: the text is no such error)."""
    at = text.rfind(FOLLOW)
    if at < 0:
        return None
    try:
        fields = json.loads(text[at + len(FOLLOW):].splitlines()[0])
    except (ValueError, IndexError):
        return None
    return fields if isinstance(fields, list) else None


def widened_row(row: dict[str, Any], fields: list[dict[str, Any]],
                job: str) -> tuple[dict[str, Any], list[str]]:
    """``row`` (a job's ``.avsc``) with ``fields`` followed: a new one appended, a wider one's
    type taken with its former lake type kept in ``sluice.older_types``. What changed."""
    out = [dict(f) for f in row.get("fields", [])]
    at = {f["name"]: i for i, f in enumerate(out)}
    changes = []
    for field in fields:
        new = kind(flat_schema({"fields": [field]}, job, "json")[0]["fields"][0]["type"])
        if field["name"] not in at:
            at[field["name"]] = len(out)
            out.append(field)
            changes.append(f"added {field['name']} {new}")
            continue
        have = out[at[field["name"]]]
        old = kind(flat_schema({"fields": [have]}, job, "json")[0]["fields"][0]["type"])
        if old == new or not widens(old, new):
            continue
        older = [*have.get(OLDER, []), old]
        out[at[field["name"]]] = {**field, OLDER: list(dict.fromkeys(older))}
        changes.append(f"widened {field['name']} from {old} to {new}")
    return {**row, "fields": out}, changes
