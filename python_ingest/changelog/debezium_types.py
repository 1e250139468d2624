"""Debezium's column types: the flat lake type each becomes, and how its values convert.

A Debezium row column is an Avro type, often with a Kafka Connect name (``connect.name``) or
a logical type saying what its value means: a date as days, a time as micro- or nanoseconds,
a Decimal as its unscaled bytes (in JSON their base64), a ``ZonedTimestamp`` as ISO text, a
geometry as WKB. ``column_type`` gives each column its flat type in the job's reader schema
and the name of the conversion its values need; ``convert`` applies that conversion to one
value when an event is flattened (changelog/debezium.py).
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from decimal import Context, Decimal
from typing import Any

from python_ingest.exceptions import ConfigError

_EXACT = Context(prec=1000)  # decimals beyond the default 28 digits, never rounded
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

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


def non_null(avro_type: Any) -> Any:
    """The one branch of an optional (``["null", T]``) type besides null; else the type."""
    if isinstance(avro_type, list):
        branches = [t for t in avro_type if t != "null"]
        return branches[0] if len(branches) == 1 else avro_type
    return avro_type


def column_type(name: str, avro_type: Any, job: str) -> tuple[Any, str, int | None]:
    """(flat Avro type, conversion, decimal scale) of one row column."""
    t = non_null(avro_type)
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
        # PostgreSQL's numeric(3,5) (scale above precision) holds |x| < 10^-2: decimal(5,5)
        # holds it (Avro and Spark need scale <= precision), as the tap lands it
        precision = None if precision is None else max(int(precision), scale)
        if precision is None or precision > 38 or scale < 0:  # beyond Spark's: exact text
            return "string", f"decimal_text:{scale}", scale
        return ({"type": "bytes", "logicalType": "decimal", "precision": precision,
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
