"""Changelog events (DBEvents): the raw columns and the Avro schema of a job.

A topic's Avro value record holds the row's own columns plus envelope fields that start with
an underscore: ``_ref_key`` (required, long; the name is the job's ``ref_key``), and optional
``_changed_columns`` (array of strings), ``_source``, ``_event_ts`` (ms), ``_is_deleted``,
``_force_update`` and ``_data_center``. ``_row_key`` is built from the job's ``row_key``
columns as its ``row_key_encoding`` says (``ChangelogSchema.keyed_differently``).

Decoding one message is in ``changelog.decode``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import fastavro

from python_ingest.changelog import debezium
from python_ingest.changelog.debezium_json import keep_older
from python_ingest.changelog.registry import RegistryClient, subject_of
from python_ingest.config import DEBEZIUM, ROW_KEY_ENCODINGS, JobConfig, Settings
from python_ingest.config.table_formats import format_named
from python_ingest.exceptions import ConfigError, SchemaRegistryError

if TYPE_CHECKING:
    pass

ENVELOPE = ("_changed_columns", "_source", "_event_ts", "_is_deleted", "_force_update",
            "_data_center")
KEY_SEPARATOR = "|"
JSON_KEYS, JOINED = ROW_KEY_ENCODINGS  # row_key_encoding: the default, and the one before #9.7
CONFLUENT_MAGIC = 0

# Columns sluice adds to every raw row, after the payload columns, in this order.
REPLAY_COLUMN = "_replay_of"  # on raw rows a replay landed: the error row they resolve
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
    # set on rows `sluice errors replay` landed again: the error row they resolve (replay/)
    (REPLAY_COLUMN, "string"),
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


def spark_type(avro_type: Any, field_name: str) -> str:
    """Spark SQL type of an Avro field type (nullable unions collapse to their value type)."""
    if isinstance(avro_type, list):
        branches = [t for t in avro_type if t != "null"]
        if len(branches) != 1:
            raise ConfigError(f"schema.{field_name}",
                              "only unions of null and one type are supported")
        return spark_type(branches[0], field_name)
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
        return f"array<{spark_type(avro_type['items'], field_name)}>"
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
    registry: str | None = None  # the schema_registry folder (absolute), read again for new ids
    row_key_encoding: str = JSON_KEYS
    # confluent-avro from a Schema Registry over HTTP: ids not loaded yet are fetched by id
    http_registry: RegistryClient | None = None
    # source: debezium: how events become flat records; envelope: the Avro reader envelope
    debezium: debezium.DebeziumFormat | None = None
    envelope: dict[str, Any] | None = None
    # _row_key never empty (changelog/keys.py): Hudi refuses an empty record key. Off for
    # Iceberg jobs, whose lakes hold '' keys already and must not be re-keyed (``of``)
    empty_key: bool = True

    @classmethod
    def of(cls, settings: Settings, job: JobConfig) -> ChangelogSchema:
        """``load`` for decoding ``job``'s events into its tables: ``empty_key`` as its table
        format needs (issue #50.2)."""
        return replace(cls.load(job, settings.root),
                       empty_key=format_named(settings.format_of(job)).refuses_empty_keys)

    @classmethod
    def load(cls, job: JobConfig, root: Path) -> ChangelogSchema:
        """Parse and check the job's schema files; raises ConfigError naming what is wrong.

        A job reading a Schema Registry over HTTP loads every version of its topic's subject
        (TopicNameStrategy) here, before anything is read: a registry that cannot be reached
        raises SchemaRegistryError, naming its URL."""
        writers = {sid: _read_schema(root, path, f"jobs.{job.name}.schema_ids.{sid}")
                   for sid, path in job.schema_ids.items()}
        if job.schema_registry:
            writers.update(registry_schemas(root, job.schema_registry, job.name))
        http = None
        if job.registry is not None and not writers:
            http = RegistryClient.of(job.registry, f"jobs.{job.name}.schema_registry")
            writers.update(http.versions(subject_of(job.topic)))
            if not writers and not job.schema:
                raise SchemaRegistryError(
                    f"the schema registry at {http.shown_url} has no subject "
                    f"'{subject_of(job.topic)}' (TopicNameStrategy) for job {job.name}: "
                    "produce to the topic with a registry-aware serializer first, or set the "
                    "job's schema (an .avsc of the newest version)")
        if job.source == DEBEZIUM:
            return cls._debezium(job, root, writers, http)
        if job.value_format == "confluent-avro" and not writers and http is None:
            raise ConfigError(f"jobs.{job.name}.schema_ids",
                              "value_format confluent-avro needs the writer schema of each id",
                              "map ids to .avsc files, e.g. {1: schemas/trips.avsc}, or set "
                              "schema_registry to a folder of <id>.avsc files")
        if job.schema:
            avro = _read_schema(root, job.schema, f"jobs.{job.name}.schema")
        else:  # the newest registered version reads all older ones
            avro = writers[max(writers)]
        return cls._checked(job, root, avro, writers, http)

    @classmethod
    def _debezium(cls, job: JobConfig, root: Path, writers: dict[int, dict[str, Any]],
                  http: RegistryClient | None) -> ChangelogSchema:
        """A Debezium job's flat reader schema: the row's columns in lake types plus the
        changelog fields flattening fills (changelog/debezium.py)."""
        given = _read_schema(root, job.schema, f"jobs.{job.name}.schema") if job.schema else None
        envelope = None
        if job.value_format == "confluent-avro":
            envelope = writers[max(writers)] if writers else given
        row_source = given or envelope
        if row_source is None:
            raise ConfigError(f"jobs.{job.name}.schema", "a json Debezium job needs the row's "
                              "schema (.avsc)", "sluice debezium scaffold writes it")
        try:
            is_envelope = {"op", "after"} <= {f["name"] for f in row_source.get("fields", [])}
            row = debezium.row_schema(row_source) if is_envelope else row_source
            if envelope is not None:
                debezium.row_schema(envelope)
        except ConfigError as exc:
            raise ConfigError(f"jobs.{job.name}.schema", str(exc)) from None
        encoding = "json" if job.value_format == "json" else "avro"
        avro, fmt = debezium.flat_schema(row, job.name, encoding, job.ordering)
        avro = keep_older(avro, row)  # types of columns it widened (changelog/debezium_json.py)
        stripped = None if envelope is None else debezium.strip_logical(envelope)
        return replace(cls._checked(replace(job, ref_key=debezium.REF_KEY), root, avro,
                                    writers, http), debezium=fmt, envelope=stripped)

    @classmethod
    def _checked(cls, job: JobConfig, root: Path, avro: dict[str, Any],
                 writers: dict[int, dict[str, Any]],
                 http: RegistryClient | None) -> ChangelogSchema:
        if avro.get("type") != "record":
            raise ConfigError(f"jobs.{job.name}.schema", "the top-level Avro type must be a record")
        fields = {f["name"]: f["type"] for f in avro["fields"]}
        source = job.schema or job.schema_registry or (http and http.shown_url)
        for column in job.row_key:
            if column not in fields:
                raise ConfigError(f"jobs.{job.name}.row_key",
                                  f"column '{column}' is not in the schema {source}")
        if job.ref_key not in fields:
            raise ConfigError(f"jobs.{job.name}.ref_key",
                              f"field '{job.ref_key}' is not in the schema {source}",
                              "every changelog event needs a ref key (a long)")
        if spark_type(fields[job.ref_key], job.ref_key) not in ("bigint", "int"):
            raise ConfigError(f"jobs.{job.name}.ref_key", f"field '{job.ref_key}' must be a long")
        envelope = set(ENVELOPE) | {job.ref_key}
        payload = tuple((name, spark_type(t, name)) for name, t in fields.items()
                        if name not in envelope)
        clash = [n for n, _ in payload if n.startswith("_")]
        if clash:
            raise ConfigError(f"jobs.{job.name}.schema",
                              f"column '{clash[0]}' starts with '_', reserved for sluice's columns")
        registry = None
        if job.schema_registry:
            folder = Path(job.schema_registry)
            registry = str(folder if folder.is_absolute() else (root / folder).resolve())
        return cls(avro=avro, payload=payload, row_key=job.row_key, ref_key=job.ref_key,
                   writer_schemas=writers, confluent=job.value_format == "confluent-avro",
                   registry=registry, row_key_encoding=job.row_key_encoding,
                   http_registry=http)

    def keyed_differently(self) -> bool:
        """Whether the two row key encodings give this job's rows different ``_row_key``\ s.

        ``json``: a single column is its text (bytes: lowercase hex); a composite key with a
        text or bytes column is the JSON list of its column texts (``["a|b", "c"]``, as the
        tap's ``sluice_row_id``), injective; a composite key of numbers, dates and times is
        joined with '|' (no text of those holds it). ``joined`` (before issue #9.7): texts
        joined with '|' (``('a|b', 'c')`` and ``('a', 'b|c')`` collide), bytes as UTF-8 text.
        """
        types = dict(self.payload)
        kinds = [types.get(c) for c in self.row_key]
        return "binary" in kinds or (len(kinds) > 1 and "string" in kinds)

    def raw_columns(self) -> tuple[tuple[str, str], ...]:
        return self.payload + RAW_META_COLUMNS


def check_job_schemas(settings: Settings) -> None:
    """Load every job's schema: raises ConfigError naming the job's field that is wrong.

    Run before any data moves (the CLI does it right after reading the config)."""
    for job in settings.jobs.values():
        if job.registry is not None and not (job.schema_registry or job.schema_ids):
            continue  # read from the registry by the job's ingest, before data moves
        ChangelogSchema.load(job, settings.root)


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
