"""Debezium change events as changelog rows (``source: debezium``; docs/debezium.md).

A Debezium event's value is an envelope: ``op`` (c create, r snapshot read, u update, d
delete), ``before`` and ``after`` (the row's images), ``source`` (where in the database's log
the change was read) and ``ts_ms``. It arrives as Avro framed by a Schema Registry, or as JSON
from Kafka Connect's JsonConverter with or without its ``{"schema", "payload"}`` envelope.

The job's reader schema is flat, as every job's: the row's columns in their lake types (the
Debezium logical types mapped as ``flat_schema`` says) plus ``_ref_key``, ``_source``,
``_event_ts`` and ``_is_deleted``. ``flatten`` turns one decoded envelope into such a record;
the chunk's column-wise conversion (changelog/decode.py) does the rest, as for any job.

Ordering (``_ref_key``, strictly increasing per row, from the source position):

- MySQL/MariaDB: ``(binlog file index << 32) | (pos + row)``: ``pos`` is the row event's
  offset in its file and every row image takes at least one byte of the event, so ``pos + row``
  grows within a file; with ``ordering: gtid`` (failover between servers) MariaDB's GTID sequence
  number (``domain-server-seq``: the domain's count, which the new primary continues) instead
  of the file index; MySQL's ``uuid:n`` counts per server and stops the batch (``_binlog_ref``);
- PostgreSQL: the commit order of the change's transaction (``_pg_ref``): a transaction in
  flight at the snapshot and committed after it outranks the snapshot's rows;
- otherwise (a documented fallback): the source's ``ts_us`` (or ``ts_ms`` × 1000): two changes
  of one row within the same microsecond are then ordered arbitrarily.

A snapshot read (``op: r``; binlog and fallback) takes the position just before the log
position its snapshot began at, so every streamed change of that row after it is newer.

JSON values are decoded by the job's schema, never guessed from their text: a Decimal's text
is the base64 of its unscaled bytes, a BYTES value's the base64 of its bytes. A column the
events carry but the schema lacks stops the batch (``ReadError``): the scaffold's ``.avsc`` is
a starting point, ``sluice debezium scaffold`` adds the new columns to it.

PostgreSQL with REPLICA IDENTITY DEFAULT: an update that leaves a TOASTed column unchanged
carries Debezium's ``__debezium_unavailable_value`` placeholder for it (text, or its bytes):
such an update is partial, ``_changed_columns`` names the columns it carries (as sluice's tap).
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Context, Decimal
from typing import Any

from python_ingest.exceptions import ConfigError, DecodeError, ReadError

REF_KEY = "_ref_key"
ORDERINGS = ("position", "gtid")  # MySQL/MariaDB: binlog file/pos/row, or the GTID
_BINLOG = ("mysql", "mariadb")
_EXACT = Context(prec=1000)  # decimals beyond the default 28 digits, never rounded
_FILE_INDEX = re.compile(r"(\d+)$")
_MARIADB_GTID = re.compile(r"^\d+-\d+-(\d+)$")
_MYSQL_GTID = re.compile(r":(\d+)$")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
# Debezium's default ``unavailable.value.placeholder``: an unchanged TOASTed value (PostgreSQL)
UNAVAILABLE = "__debezium_unavailable_value"
_UNAVAILABLE_BYTES = UNAVAILABLE.encode()
_UNAVAILABLE_BASE64 = base64.b64encode(_UNAVAILABLE_BYTES).decode()  # a bytes column in JSON
# PostgreSQL ref keys: (commit bound << 18) | order within it; LSNs below 2^45 (as the tap's)
PG_SHIFT = 18
PG_MAX_LSN = (1 << (63 - PG_SHIFT)) - 2
_PG_MINOR = (1 << PG_SHIFT) - 1
_ENVELOPE_FIELDS = [
    {"name": REF_KEY, "type": "long"},
    {"name": "_changed_columns", "type": ["null", {"type": "array", "items": "string"}],
     "default": None},
    {"name": "_source", "type": ["null", "string"], "default": None},
    {"name": "_event_ts", "type": ["null", "long"], "default": None},
    {"name": "_is_deleted", "type": "boolean", "default": False},
]

# connect.name (or logicalType) -> (flat Avro type, conversion of the value)
_TEMPORAL: dict[str, tuple[Any, str]] = {
    "io.debezium.time.Date": ({"type": "int", "logicalType": "date"}, ""),
    "org.apache.kafka.connect.data.Date": ({"type": "int", "logicalType": "date"}, ""),
    "date": ({"type": "int", "logicalType": "date"}, ""),
    "io.debezium.time.Timestamp": ({"type": "long", "logicalType": "timestamp-millis"}, ""),
    "org.apache.kafka.connect.data.Timestamp": (
        {"type": "long", "logicalType": "timestamp-millis"}, ""),
    "timestamp-millis": ({"type": "long", "logicalType": "timestamp-millis"}, ""),
    "io.debezium.time.MicroTimestamp": ({"type": "long", "logicalType": "timestamp-micros"}, ""),
    "timestamp-micros": ({"type": "long", "logicalType": "timestamp-micros"}, ""),
    "io.debezium.time.NanoTimestamp": ({"type": "long", "logicalType": "timestamp-micros"},
                                       "nanos"),
    "io.debezium.time.ZonedTimestamp": ({"type": "long", "logicalType": "timestamp-micros"},
                                        "zoned"),
    "io.debezium.time.Time": ("string", "time_ms"),
    "org.apache.kafka.connect.data.Time": ("string", "time_ms"),
    "time-millis": ("string", "time_ms"),
    "io.debezium.time.MicroTime": ("string", "time_us"),
    "time-micros": ("string", "time_us"),
    "io.debezium.time.NanoTime": ("string", "time_ns"),
}
_TEXT = ("io.debezium.data.Json", "io.debezium.data.Uuid", "io.debezium.data.Enum",
         "io.debezium.data.EnumSet", "io.debezium.data.Xml", "io.debezium.time.ZonedTime",
         "io.debezium.time.Interval", "io.debezium.data.Ltree")
_GEOMETRY = ("io.debezium.data.geometry.Geometry", "io.debezium.data.geometry.Point",
             "io.debezium.data.geometry.Geography")
_PLAIN = {"string": "string", "long": "long", "int": "long", "boolean": "boolean",
          "float": "float", "double": "double", "bytes": "bytes"}


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


def _branch(avro_type: Any) -> Any:
    if isinstance(avro_type, list):
        branches = [t for t in avro_type if t != "null"]
        return branches[0] if len(branches) == 1 else avro_type
    return avro_type


def _column_type(name: str, avro_type: Any, job: str) -> tuple[Any, str, int | None]:
    """(flat Avro type, conversion, decimal scale) of one row column."""
    t = _branch(avro_type)
    if isinstance(t, str):
        if t in _PLAIN:
            return _PLAIN[t], "", None
        raise ConfigError(f"jobs.{job}.schema", f"column '{name}': unsupported type {t!r}")
    if not isinstance(t, dict):
        raise ConfigError(f"jobs.{job}.schema", f"column '{name}': unsupported type {t!r}")
    connect = t.get("connect.name") or t.get("logicalType") or ""
    if connect in _TEMPORAL:
        flat, conversion = _TEMPORAL[connect]
        return flat, conversion, None
    if connect in _TEXT:
        return "string", "", None
    if connect in _GEOMETRY:
        return "bytes", "wkb", None
    if connect in ("io.debezium.time.Year", "io.debezium.time.MicroDuration"):
        return "long", "", None
    if connect == "io.debezium.data.VariableScaleDecimal":
        return "string", "variable_decimal", None
    if connect in ("org.apache.kafka.connect.data.Decimal", "decimal"):
        params = t.get("connect.parameters") or {}
        scale = int(t.get("scale", params.get("scale", 0)))
        precision = t.get("precision", params.get("connect.decimal.precision"))
        if precision is None or int(precision) > 38:  # beyond Spark's decimals: exact text
            return "string", f"decimal_text:{scale}", scale
        return ({"type": "bytes", "logicalType": "decimal", "precision": int(precision),
                 "scale": scale}, "decimal", scale)
    if connect == "io.debezium.data.Bits":
        length = int((t.get("connect.parameters") or {}).get("length", 64))
        if length <= 63:
            return "long", "bits", None
        return {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 0}, \
            "bits_decimal", None
    base = t.get("type")
    if base == "enum":
        return "string", "", None
    if isinstance(base, str) and base in _PLAIN:
        return _PLAIN[base], "", None
    raise ConfigError(f"jobs.{job}.schema",
                      f"column '{name}': unsupported Debezium type {connect or base!r}")


def row_schema(envelope: dict[str, Any]) -> dict[str, Any]:
    """The row's record schema inside a Debezium envelope (its ``after`` field's type)."""
    fields = {f["name"]: f["type"] for f in envelope.get("fields", [])}
    if "op" not in fields or "after" not in fields:
        raise ConfigError("schema", f"{envelope.get('name', 'the schema')} is not a Debezium "
                          "change event envelope (no 'op' and 'after' fields)")
    found = _branch(fields["after"])
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
        flat, conversion, scale = _column_type(f["name"], f["type"], job)
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
        if out.get("type") == "record":
            out["fields"] = [{**f, "type": strip_logical(f["type"])} for f in out["fields"]]
        elif isinstance(out.get("type"), dict | list):
            out["type"] = strip_logical(out["type"])
        return out
    return avro_type


_PAYLOAD = b',"payload":'


def _payload_only(value: bytes) -> Any:
    """The payload of a JsonConverter message ``{"schema":...,"payload":...}`` without parsing
    its schema (most of the message, the same in every one): the last top-level key's value.
    Going back from the end, the first ``,"payload":`` whose rest parses whole is that key (one
    inside the payload leaves closing braces over; inside a string the quote is escaped).
    None when the message is not in that shape."""
    if not value.startswith(b'{"schema":') or not value.endswith(b"}"):
        return None
    end = len(value) - 1
    at = value.rfind(_PAYLOAD, 0, end)
    while at > 0:
        try:
            return json.loads(value[at + len(_PAYLOAD):end])
        except ValueError:
            at = value.rfind(_PAYLOAD, 0, at)
    return None


def parse_json(value: bytes) -> dict[str, Any]:
    """A JsonConverter message: the payload, with or without the schema envelope."""
    event = _payload_only(value)
    if isinstance(event, dict):
        return event
    try:
        event = json.loads(value)
    except (UnicodeDecodeError, ValueError) as exc:
        raise DecodeError(f"not JSON: {type(exc).__name__}: {exc}") from None
    if isinstance(event, dict) and "payload" in event and "schema" in event:
        event = event["payload"]
    if not isinstance(event, dict):
        raise DecodeError("not a Debezium change event: the JSON value is not an object")
    return event


def _time_text(value: int, per_second: int) -> str:
    sign = "-" if value < 0 else ""
    total, fraction = divmod(abs(value), per_second)
    hours, rest = divmod(total, 3600)
    text = f"{sign}{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
    if fraction:
        digits = len(str(per_second)) - 1
        text += "." + f"{fraction:0{digits}d}"[:6].rstrip("0")
    return text


def _decimal(value: Any, scale: int) -> Decimal:
    """A Connect Decimal: as Avro decodes it (Decimal already), its unscaled big-endian bytes,
    or in JSON the base64 text of those bytes, always (the schema says Decimal: a text that
    also reads as a number, e.g. ``1111``, is still base64). A JSON number is that number."""
    if isinstance(value, Decimal):
        return value
    if isinstance(value, str):
        value = base64.b64decode(value, validate=True)
    if isinstance(value, bytes):
        return Decimal(int.from_bytes(value, "big", signed=True)).scaleb(-scale, _EXACT)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"a {type(value).__name__} is not a Decimal's value")
    return Decimal(str(value))


def _bits(value: Any) -> int:
    raw = base64.b64decode(value) if isinstance(value, str) else value
    return int.from_bytes(raw, "little")  # Debezium's Bits: little-endian bytes


def convert(value: Any, conversion: str, scale: int) -> Any:
    """One column's Debezium value as its flat type (None stays None)."""
    if value is None:
        return None
    if conversion == "nanos":
        return value // 1000
    if conversion == "zoned":  # exact before 1970 too (no float, no truncation toward zero)
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return (moment - _EPOCH) // _MICROSECOND
    if conversion == "base64":
        return base64.b64decode(value, validate=True) if isinstance(value, str) else value
    if conversion.startswith("time_"):
        per_second = {"time_ms": 1000, "time_us": 1_000_000, "time_ns": 1_000_000_000}
        return _time_text(int(value), per_second[conversion])
    if conversion == "decimal":
        return _decimal(value, scale)
    if conversion.startswith("decimal_text"):  # exactly ``scale`` decimals, as the tap's
        return format(_decimal(value, scale).quantize(Decimal(1).scaleb(-scale), None, _EXACT),
                      "f")
    if conversion == "variable_decimal":
        raw = value["value"]
        raw = base64.b64decode(raw) if isinstance(raw, str) else raw
        return format(Decimal(int.from_bytes(raw, "big", signed=True))
                      .scaleb(-int(value["scale"]), _EXACT), "f")
    if conversion == "bits":
        return _bits(value)
    if conversion == "bits_decimal":
        return Decimal(_bits(value))
    if conversion == "wkb":
        wkb = value.get("wkb") if isinstance(value, dict) else value
        return base64.b64decode(wkb) if isinstance(wkb, str) else wkb
    return value


def _binlog_ref(source: dict[str, Any], ordering: str, snapshot: bool) -> int | None:
    offset = int(source.get("pos") or 0) + int(source.get("row") or 0)
    if ordering == "gtid":
        if snapshot:  # snapshot reads carry no GTID: older than every streamed change
            return 1
        gtid = str(source.get("gtid") or "")
        if _MYSQL_GTID.search(gtid) and not _MARIADB_GTID.match(gtid):
            raise ReadError(
                f"ordering gtid cannot order MySQL changes (GTID {gtid}): MySQL counts each "
                "server's GTIDs apart (uuid:n), so after a failover the new primary's changes "
                "would rank below the old one's and the lake would keep stale rows. Set the "
                "job's ordering: position (one server; a failover then needs the job started "
                "over), or capture the tables with `sluice tap`, which follows failovers "
                "(docs/debezium.md, Ordering); nothing of this batch was committed")
        found = _MARIADB_GTID.match(gtid)
        if found is None:
            raise DecodeError(f"ordering gtid: a change without a GTID ({source.get('gtid')!r}"
                              "): turn GTIDs on in the server, or use ordering: position")
        return (int(found.group(1)) << 32) | (offset & 0xFFFFFFFF)
    found = _FILE_INDEX.search(str(source.get("file") or ""))
    if found is None:
        return None
    return (int(found.group(1)) << 32) | (offset & 0xFFFFFFFF)


def _last_commit(source: dict[str, Any]) -> int | None:
    """The commit LSN of the transaction Debezium streamed before this change's (the first of
    ``source.sequence``, ``["<last commit lsn>", "<lsn>"]``); None when it has none yet."""
    sequence = source.get("sequence")
    if not sequence:
        return None
    try:
        last = json.loads(sequence)[0]
    except (ValueError, TypeError, IndexError, KeyError):
        raise DecodeError(f"source.sequence {sequence!r:.80} is not Debezium's "
                          '["<last commit lsn>", "<lsn>"]') from None
    return None if last is None else int(last)


def _pg_ref(source: dict[str, Any], snapshot: bool) -> int:
    """A PostgreSQL change's ref key: ``(bound << 18) | order``, ranking transactions in the
    order they committed (Debezium streams them so), which a change's own ``lsn`` does not:
    a transaction in flight at the snapshot has changes below the snapshot's LSN.

    ``last`` is the commit LSN of the transaction streamed before (``source.sequence``). A
    streamed change with ``lsn > last`` takes bound ``lsn + 1``; one written before that commit
    bound ``last + 1`` and an order growing with its ``lsn`` (exact within 256 KiB of WAL
    before ``last``, 1 further back). Every bound lies in ``(last, this commit]``, so the next
    transaction (whose ``last`` is this one's commit) outranks all of this one's changes.
    A snapshot row takes ``(last + 1) << 18``: above every change committed up to ``last``
    (streamed before the snapshot), below every change streamed after it. A snapshot without
    a ``last`` (a new connector: nothing streamed before it) takes 0, below every change."""
    lsn = int(source["lsn"])
    last = _last_commit(source)
    if snapshot:
        return 0 if last is None else (last + 1) << PG_SHIFT
    if last is None or lsn > last:
        bound, order = lsn + 1, 1
    else:
        bound, order = last + 1, max(1, _PG_MINOR - (last - lsn))
    if bound > PG_MAX_LSN:
        raise DecodeError(f"PostgreSQL LSN {bound} does not fit a ref key (at most "
                          f"{PG_MAX_LSN}): start the job over on a new topic "
                          "(docs/debezium.md, Ordering)")
    return (bound << PG_SHIFT) | order


def ref_key(event: dict[str, Any], ordering: str) -> int:
    """The change's ``_ref_key`` from its source position (the module's docstring)."""
    source = event.get("source") or {}
    connector = str(source.get("connector") or "")
    ref: int | None = None
    if connector in _BINLOG:
        ref = _binlog_ref(source, ordering, event.get("op") == "r")
    elif connector == "postgresql" and source.get("lsn") is not None:
        return _pg_ref(source, event.get("op") == "r")
    if ref is None:  # the fallback: the change's time in microseconds
        us = source.get("ts_us") or event.get("ts_us")
        ms = source.get("ts_ms") or event.get("ts_ms")
        if us is not None:
            ref = int(us)
        elif ms is not None:
            ref = int(ms) * 1000
        else:
            raise DecodeError("Debezium event without a source position or time: cannot order it")
    if event.get("op") == "r":  # a snapshot read: just before the log position it began at
        ref = max(ref - 1, 0)
    return ref


def flatten(event: dict[str, Any], fmt: DebeziumFormat) -> dict[str, Any]:
    """One decoded Debezium envelope as a flat changelog record (raises DecodeError)."""
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
            record[name] = convert(record[name], conversion, scales.get(name, 0))
        except (ValueError, TypeError, KeyError, ArithmeticError) as exc:
            raise DecodeError(f"column '{name}': {record[name]!r:.80} is not a valid "
                              f"{conversion} value: {type(exc).__name__}: {exc}") from None
    record[REF_KEY] = ref_key(event, fmt.ordering)
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
