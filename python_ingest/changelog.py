"""Changelog events (DBEvents): the Avro schema of a job and the decoding of one message.

A topic's Avro value record holds the row's own columns plus envelope fields that start with
an underscore: ``_ref_key`` (required, long; the name is the job's ``ref_key``), and optional
``_changed_columns`` (array of strings), ``_source``, ``_event_ts`` (ms), ``_is_deleted``,
``_force_update`` and ``_data_center``. The row key is built from the job's ``row_key``
columns (joined with ``|`` when composite).

Decoding runs inside Spark tasks, so everything here is plain Python and picklable.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import fastavro

from python_ingest.config import JobConfig
from python_ingest.exceptions import ConfigError

if TYPE_CHECKING:
    import pyarrow as pa

ENVELOPE = ("_changed_columns", "_source", "_event_ts", "_is_deleted", "_force_update",
            "_data_center")
KEY_SEPARATOR = "|"
CONFLUENT_MAGIC = 0

# Columns sluice adds to every raw row, after the payload columns, in this order.
RAW_META_COLUMNS: tuple[tuple[str, str], ...] = (
    ("_row_key", "string"),
    ("_ref_key", "bigint"),
    ("_changed_columns", "array<string>"),
    ("_source", "string"),
    ("_event_ts", "timestamp"),
    ("_is_deleted", "boolean"),
    ("_force_update", "boolean"),
    ("_data_center", "string"),
    ("_kafka_partition", "int"),
    ("_kafka_offset", "bigint"),
    ("_kafka_timestamp", "timestamp"),
    ("_batch_id", "bigint"),
    ("_ingested_at", "timestamp"),
)
# The raw error table: what could not become a raw row, with its bytes.
RAW_ERROR_COLUMNS: tuple[tuple[str, str], ...] = (
    ("_row_key", "string"),
    ("error_exception", "string"),
    ("error_source_data", "binary"),
    ("_kafka_key", "binary"),
    ("_kafka_partition", "int"),
    ("_kafka_offset", "bigint"),
    ("_kafka_timestamp", "timestamp"),
    ("_batch_id", "bigint"),
    ("_ingested_at", "timestamp"),
)

_PRIMITIVES = {"boolean": "boolean", "int": "int", "long": "bigint", "float": "float",
               "double": "double", "string": "string", "bytes": "binary"}


def _spark_type(avro_type: Any, field_name: str) -> str:
    """Spark SQL type of an Avro field type (nullable unions collapse to their value type)."""
    if isinstance(avro_type, list):
        branches = [t for t in avro_type if t != "null"]
        if len(branches) != 1:
            raise ConfigError(f"schema.{field_name}", "only unions of null and one type are supported")
        return _spark_type(branches[0], field_name)
    if isinstance(avro_type, str):
        if avro_type in _PRIMITIVES:
            return _PRIMITIVES[avro_type]
        raise ConfigError(f"schema.{field_name}", f"unsupported Avro type {avro_type!r}")
    logical = avro_type.get("logicalType")
    base = avro_type.get("type")
    if logical in ("timestamp-millis", "timestamp-micros"):
        return "timestamp"
    if logical == "date":
        return "date"
    if logical == "decimal":
        return f"decimal({avro_type['precision']},{avro_type.get('scale', 0)})"
    if base == "enum":
        return "string"
    if base == "array":
        return f"array<{_spark_type(avro_type['items'], field_name)}>"
    if base in _PRIMITIVES:
        return _PRIMITIVES[base]
    raise ConfigError(f"schema.{field_name}", f"unsupported Avro type {avro_type!r}")


@dataclass(frozen=True)
class ChangelogSchema:
    """A job's reader schema, split into payload columns and envelope fields."""

    avro: dict[str, Any]
    payload: tuple[tuple[str, str], ...]  # (column, spark type)
    row_key: tuple[str, ...]
    ref_key: str
    writer_schemas: dict[int, dict[str, Any]]
    confluent: bool

    @classmethod
    def load(cls, job: JobConfig, root: Path) -> ChangelogSchema:
        """Parse and check the job's schema files; raises ConfigError naming what is wrong."""
        writers = {sid: _read_schema(root, path, f"jobs.{job.name}.schema_ids.{sid}")
                   for sid, path in job.schema_ids.items()}
        if job.schema_registry:
            writers.update(registry_schemas(root, job.schema_registry, job.name))
        if job.value_format == "confluent-avro" and not writers:
            raise ConfigError(f"jobs.{job.name}.schema_ids",
                              "value_format confluent-avro needs the writer schema of each id",
                              "map ids to .avsc files, e.g. {1: schemas/trips.avsc}, or set "
                              "schema_registry to a folder of <id>.avsc files")
        if job.schema:
            avro = _read_schema(root, job.schema, f"jobs.{job.name}.schema")
        else:  # the newest registered version reads all older ones
            avro = writers[max(writers)]
        if avro.get("type") != "record":
            raise ConfigError(f"jobs.{job.name}.schema", "the top-level Avro type must be a record")
        fields = {f["name"]: f["type"] for f in avro["fields"]}
        source = job.schema or job.schema_registry
        for column in job.row_key:
            if column not in fields:
                raise ConfigError(f"jobs.{job.name}.row_key",
                                  f"column '{column}' is not in the schema {source}")
        if job.ref_key not in fields:
            raise ConfigError(f"jobs.{job.name}.ref_key",
                              f"field '{job.ref_key}' is not in the schema {source}",
                              "every changelog event needs a ref key (a long)")
        if _spark_type(fields[job.ref_key], job.ref_key) not in ("bigint", "int"):
            raise ConfigError(f"jobs.{job.name}.ref_key", f"field '{job.ref_key}' must be a long")
        envelope = set(ENVELOPE) | {job.ref_key}
        payload = tuple((name, _spark_type(t, name)) for name, t in fields.items()
                        if name not in envelope)
        clash = [n for n, _ in payload if n.startswith("_")]
        if clash:
            raise ConfigError(f"jobs.{job.name}.schema",
                              f"column '{clash[0]}' starts with '_', reserved for sluice's columns")
        return cls(avro=avro, payload=payload, row_key=job.row_key, ref_key=job.ref_key,
                   writer_schemas=writers, confluent=job.value_format == "confluent-avro")

    def raw_columns(self) -> tuple[tuple[str, str], ...]:
        return self.payload + RAW_META_COLUMNS

    def arrow_schema(self) -> pa.Schema:
        """Arrow schema of the combined reader output: raw columns plus error columns."""
        from pyspark.sql.pandas.types import to_arrow_schema
        from pyspark.sql.types import _parse_datatype_string

        return to_arrow_schema(_parse_datatype_string(combined_ddl(self)))


def combined_ddl(schema: ChangelogSchema) -> str:
    """DDL of what a reader task emits: raw columns, then the raw error table's extra columns."""
    cols = list(schema.raw_columns())
    cols += [(n, t) for n, t in RAW_ERROR_COLUMNS if n not in dict(cols)]
    return ", ".join(f"`{n}` {t}" for n, t in cols)


def registry_schemas(root: Path, folder: str, job_name: str) -> dict[int, dict[str, Any]]:
    """The schema versions in a registry folder: ``<id>.avsc`` files, id a positive integer."""
    path = Path(folder) if Path(folder).is_absolute() else root / folder
    found = {}
    for file in sorted(path.glob("*.avsc")):
        if not file.stem.isdigit() or int(file.stem) <= 0:
            raise ConfigError(f"jobs.{job_name}.schema_registry",
                              f"{file.name} is not named <id>.avsc with a positive integer id")
        found[int(file.stem)] = _read_schema(root, str(file), f"jobs.{job_name}.schema_registry")
    if not found:
        raise ConfigError(f"jobs.{job_name}.schema_registry", f"no <id>.avsc files in {path}")
    return found


def _read_schema(root: Path, path: str, field_name: str) -> dict[str, Any]:
    file = Path(path) if Path(path).is_absolute() else root / path
    try:
        parsed = json.loads(file.read_text())
        fastavro.parse_schema(parsed)
    except FileNotFoundError as exc:
        raise ConfigError(field_name, f"schema file {file} does not exist") from exc
    except (ValueError, fastavro.schema.SchemaParseException) as exc:
        raise ConfigError(field_name, f"{file} is not a valid Avro schema: {exc}") from exc
    return dict(parsed)


class DecodeError(Exception):
    """One message could not become a raw row; the message text goes to the error table."""


class Decoder:
    """Decodes message values into raw-row dicts (one per executor task)."""

    def __init__(self, schema: ChangelogSchema) -> None:
        self.schema = schema
        self.reader = fastavro.parse_schema(schema.avro)
        self.writers = {sid: fastavro.parse_schema(s) for sid, s in schema.writer_schemas.items()}
        self.payload_names = [n for n, _ in schema.payload]

    def decode(self, value: bytes | None) -> dict[str, Any]:
        """Decode one message value to a raw row (without Kafka coordinates)."""
        if not value:
            raise DecodeError("empty message value (tombstone or null)")
        writer = self.reader
        start = 0
        if self.schema.confluent:
            if len(value) < 5 or value[0] != CONFLUENT_MAGIC:
                raise DecodeError("not in Confluent wire format (magic byte 0 + 4-byte schema id)")
            sid = int.from_bytes(value[1:5], "big")
            if sid not in self.writers:
                raise DecodeError(f"unknown schema id {sid}: add it to the job's schema_ids")
            writer = self.writers[sid]
            start = 5
        buffer = io.BytesIO(value)
        buffer.seek(start)
        try:
            record = fastavro.schemaless_reader(buffer, writer, self.reader)
        except Exception as exc:  # fastavro raises many types on corrupt input
            raise DecodeError(f"Avro decode failed: {type(exc).__name__}: {exc}") from None
        if buffer.tell() != len(value):
            raise DecodeError(f"Avro decode left {len(value) - buffer.tell()} trailing bytes: "
                              "the message does not match the job's schema")
        if not isinstance(record, dict):
            raise DecodeError("Avro value is not a record")
        key_parts = []
        for column in self.schema.row_key:
            part = record.get(column)
            if part is None:
                raise DecodeError(f"row key column '{column}' is null")
            key_parts.append(str(part))
        ref = record.get(self.schema.ref_key)
        if ref is None:
            raise DecodeError(f"ref key '{self.schema.ref_key}' is null")
        row = {name: record.get(name) for name in self.payload_names}
        event_ts = record.get("_event_ts")
        if event_ts is not None and not isinstance(event_ts, int):
            event_ts = int(event_ts.timestamp() * 1000)
        row.update(
            _row_key=KEY_SEPARATOR.join(key_parts),
            _ref_key=int(ref),
            _changed_columns=record.get("_changed_columns"),
            _source=record.get("_source"),
            _event_ts=event_ts,
            _is_deleted=bool(record.get("_is_deleted") or False),
            _force_update=bool(record.get("_force_update") or False),
            _data_center=record.get("_data_center"),
        )
        return row
