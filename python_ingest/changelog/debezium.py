"""Debezium change events as changelog rows (``source: debezium``; docs/debezium.md).

A Debezium event's value is an envelope: ``op`` (c create, r snapshot read, u update, d
delete), ``before`` and ``after`` (the row's images), ``source`` (where in the database's log
the change was read) and ``ts_ms``. It arrives as Avro framed by a Schema Registry, or as JSON
from Kafka Connect's JsonConverter with or without its ``{"schema", "payload"}`` envelope.

The job's reader schema is flat, as every job's: the row's columns in their lake types (the
Debezium logical types mapped as ``flat_schema`` says) plus ``_ref_key``, ``_source``,
``_event_ts`` and ``_is_deleted``. ``flatten`` turns one decoded envelope into such a record;
the chunk's column-wise conversion (changelog/decode.py) does the rest, as for any job.

Ordering (``_ref_key``, strictly increasing per row, from the source position) is in
changelog/debezium_ordering.py: the binlog position (or MariaDB's GTID) for MySQL/MariaDB,
the commit order for PostgreSQL, else the change's time. The column types and their
conversions are in debezium_types.py, the reader schema and ``DebeziumFormat`` in
debezium_schema.py; this module re-exports their public names, its callers' one door.

JSON values are decoded by a schema, never guessed from their text: a Decimal's text is the
base64 of its unscaled bytes, a BYTES value's the base64 of its bytes. ``JsonReader`` reads a
message with schemas (``schemas.enable=true``) by the schema it carries, checked once per
distinct schema against the job's (changelog/debezium_json.py): a column added or widened at
the source stops the read with a ``ReadError`` the ingest step follows (it widens the job's
``.avsc`` and reads the batch again, sources/debezium/follow.py); a change no lake can follow
stops the batch naming the column. A message without its schema is read by the job's: a
column the job's ``.avsc`` lacks stops the batch (``ReadError``; add it to the ``.avsc``).

PostgreSQL with REPLICA IDENTITY DEFAULT: an update that leaves a TOASTed column unchanged
carries Debezium's ``__debezium_unavailable_value`` placeholder for it (text, or its bytes):
such an update is partial, ``_changed_columns`` names the columns it carries (as sluice's tap).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from python_ingest.changelog.debezium_json import message_format
from python_ingest.changelog.debezium_ordering import (
    ORDERINGS,
    PG_MAX_LSN,
    PG_SHIFT,
    UNCHECKED,
    ReadBound,
    ref_key,
)
from python_ingest.changelog.debezium_schema import (
    REF_KEY,
    DebeziumFormat,
    check_writer,
    flat_schema,
    row_schema,
    strip_logical,
)
from python_ingest.changelog.debezium_types import convert
from python_ingest.exceptions import DecodeError, ReadError

__all__ = ["ORDERINGS", "PG_MAX_LSN", "PG_SHIFT", "REF_KEY", "UNAVAILABLE", "UNCHECKED",
           "DebeziumFormat", "JsonReader", "ReadBound", "check_writer", "convert", "flat_schema",
           "flatten", "parse_json", "ref_key", "row_schema", "strip_logical"]

# Debezium's default ``unavailable.value.placeholder``: an unchanged TOASTed value (PostgreSQL)
UNAVAILABLE = "__debezium_unavailable_value"
_UNAVAILABLE_BYTES = UNAVAILABLE.encode()
_UNAVAILABLE_BASE64 = base64.b64encode(_UNAVAILABLE_BYTES).decode()  # a bytes column in JSON

_PAYLOAD = b',"payload":'


def _split(value: bytes) -> tuple[bytes | None, Any]:
    """A JsonConverter message ``{"schema":...,"payload":...}`` as its schema part (the bytes
    ``{"schema":...`` before the payload, unparsed: the same in every message of one version
    of the table) and its parsed payload, the last top-level key's value. Going back from the
    end, the first ``,"payload":`` whose rest parses whole is that key (one inside the payload
    leaves closing braces over; inside a string the quote is escaped). (None, None) when the
    message is not in that shape."""
    if not value.startswith(b'{"schema":') or not value.endswith(b"}"):
        return None, None
    end = len(value) - 1
    at = value.rfind(_PAYLOAD, 0, end)
    while at > 0:
        try:
            return value[:at], json.loads(value[at + len(_PAYLOAD):end])
        except ValueError:
            at = value.rfind(_PAYLOAD, 0, at)
    return None, None


def _parsed(value: bytes) -> tuple[Any, dict[str, Any]]:
    """(the message's parsed schema or None, its change event)."""
    try:
        event = json.loads(value)
    except (UnicodeDecodeError, ValueError) as exc:
        raise DecodeError(f"not JSON: {type(exc).__name__}: {exc}") from None
    schema = None
    if isinstance(event, dict) and "payload" in event and "schema" in event:
        schema, event = event["schema"], event["payload"]
    if not isinstance(event, dict):
        raise DecodeError("not a Debezium change event: the JSON value is not an object")
    return schema, event


def parse_json(value: bytes) -> dict[str, Any]:
    """A JsonConverter message: the payload, with or without the schema envelope."""
    _, event = _split(value)
    if isinstance(event, dict):
        return event
    return _parsed(value)[1]


class JsonReader:
    """A JSON job's messages as flat records, each read by the schema it carries (its
    ``DebeziumFormat`` made once per distinct schema: ``message_format``); a message without
    one by the job's ``fmt``. ``reader``: the job's flat schema."""

    LIMIT = 256  # distinct schemas kept (a table has one per version)

    def __init__(self, fmt: DebeziumFormat, reader: dict[str, Any]) -> None:
        self.fmt = fmt
        self.reader = reader
        self.forms: dict[bytes, DebeziumFormat] = {}

    def record(self, value: bytes, bounds: ReadBound | None = None) -> dict[str, Any]:
        part, event = _split(value)
        schema = None
        if part is None or not isinstance(event, dict):
            schema, event = _parsed(value)
            if schema is None:
                return flatten(event, self.fmt, bounds)
            part = json.dumps(schema, sort_keys=True).encode()
        form = self.forms.get(part)
        if form is None:
            if schema is None:
                try:
                    schema = json.loads(part + b"}")["schema"]
                except (ValueError, KeyError, TypeError):
                    schema = _parsed(value)[0]
            if not isinstance(schema, dict):
                raise DecodeError("a Debezium JSON event whose schema is not an object")
            form = message_format(schema, self.fmt, self.reader)
            if len(self.forms) >= self.LIMIT:
                self.forms.clear()
            self.forms[part] = form
        return flatten(event, form, bounds)


def flatten(event: dict[str, Any], fmt: DebeziumFormat,
            bounds: ReadBound | None = None) -> dict[str, Any]:
    """One decoded Debezium envelope as a flat changelog record (raises DecodeError);
    ``bounds``: its partition's snapshot reads so far (``ref_key``)."""
    op = event.get("op")
    if op in ("c", "r", "u"):
        row = event.get("after")
    elif op == "d":
        row = event.get("before")
    elif op == "t":
        raise DecodeError("a Debezium truncate event: sluice applies row changes only; empty "
                          "the lake table yourself if the source table was truncated")
    else:
        raise DecodeError(f"not a Debezium change event: op {op!r}")
    if not isinstance(row, dict):
        image = "before" if op == "d" else "after"
        raise DecodeError(f"Debezium '{op}' event without its '{image}' image (PostgreSQL: set "
                          "the table's REPLICA IDENTITY FULL for deletes)")
    if fmt.encoding == "json" and not row.keys() <= fmt.known:
        _new_columns(row, fmt)  # Avro: the reader is the newest registered version
    record = {name: row.get(name) for name in fmt.columns}
    source = event.get("source") or {}
    unchanged = _unavailable(record, fmt) if op == "u" and source.get(
        "connector") == "postgresql" else ()
    scales = dict(fmt.scales)
    for name, conversion in fmt.conversions:
        if name in unchanged:
            continue
        try:
            value = record[name]
            record[name] = value * 1000 if conversion == "ms_to_us" and isinstance(
                value, int) else convert(value, conversion, scales.get(name, 0))
        except (ValueError, TypeError, KeyError, ArithmeticError) as exc:
            raise DecodeError(f"column '{name}': {record[name]!r:.80} is not a valid "
                              f"{conversion} value: {type(exc).__name__}: {exc}") from None
    record[REF_KEY] = ref_key(event, fmt.ordering, bounds)
    record["_changed_columns"] = [n for n in fmt.columns if n not in unchanged] \
        if unchanged else None
    record["_source"] = source.get("connector")
    ts = source.get("ts_ms") if source.get("ts_ms") is not None else event.get("ts_ms")
    record["_event_ts"] = int(ts) if ts is not None else None
    record["_is_deleted"] = op == "d"
    return record


def _unavailable(record: dict[str, Any], fmt: DebeziumFormat) -> tuple[str, ...]:
    """Columns holding Debezium's placeholder for an unchanged TOASTed value (PostgreSQL, not
    REPLICA IDENTITY FULL), set to None: the text, its bytes, or in JSON their base64."""
    found = tuple(name for name, value in record.items()
                  if value == UNAVAILABLE and name not in fmt.binary
                  or name in fmt.binary and value in (_UNAVAILABLE_BYTES, _UNAVAILABLE_BASE64))
    for name in found:
        record[name] = None
    return found


def _new_columns(row: dict[str, Any], fmt: DebeziumFormat) -> None:
    """Stop the batch: the events carry columns the job's schema lacks (one added at the
    source); landing them without would drop the column's values silently."""
    new = sorted(set(row) - fmt.known)
    raise ReadError(
        f"job {fmt.job}: Debezium events carry column(s) {', '.join(new)} that the job's schema "
        "lacks (added at the source since the schema was written): run `sluice debezium "
        f"scaffold --value-format json <the job's topic>` to add them to its .avsc (a new "
        "schema version: the raw and lake tables gain the columns), then run again; nothing "
        "of this batch was committed")
