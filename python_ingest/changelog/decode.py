"""Decoding one changelog message (Avro, plain or Confluent-framed) into a raw row.

Decoding runs inside Spark tasks, so everything here is plain Python and picklable.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import fastavro

from python_ingest.changelog import debezium
from python_ingest.changelog.keys import row_key_column
from python_ingest.changelog.registry import RegistryClient
from python_ingest.changelog.schema import (
    CONFLUENT_MAGIC,
    JOINED,
    KEY_SEPARATOR,
    RAW_META_COLUMNS,
    ChangelogSchema,
    spark_type,
)
from python_ingest.exceptions import DecodeError

if TYPE_CHECKING:
    import pyarrow as pa


# Logical types decoded as their plain integers and converted column-wise with Arrow: much
# faster than fastavro building a datetime per value.
_PLAIN_LOGICAL = {"timestamp-millis": "ms", "timestamp-micros": "us", "date": "date",
                  "local-timestamp-millis": "ms", "local-timestamp-micros": "us"}


def _strip_logical(avro_type: Any) -> Any:
    """The schema with the top-level fields' plain logical types as their integers (converted
    column-wise by ``Decoder._convert``); an array's items keep theirs, as nothing converts
    them afterwards (fastavro decodes them to dates and datetimes)."""
    if isinstance(avro_type, list):
        return [_strip_logical(t) for t in avro_type]
    if isinstance(avro_type, dict):
        if avro_type.get("logicalType") in _PLAIN_LOGICAL:
            return avro_type["type"]
        if avro_type.get("type") == "record":
            return {**avro_type, "fields": [{**f, "type": _strip_logical(f["type"])}
                                            for f in avro_type["fields"]]}
    return avro_type


def _plain_units(avro: dict[str, Any]) -> dict[str, str]:
    """Top-level fields whose logical type is decoded plain: field -> ms, us or date."""
    units = {}
    for f in avro["fields"]:
        branches = f["type"] if isinstance(f["type"], list) else [f["type"]]
        for t in branches:
            if isinstance(t, dict) and t.get("logicalType") in _PLAIN_LOGICAL:
                units[f["name"]] = _PLAIN_LOGICAL[t["logicalType"]]
    return units


def arrow_type(spark_type: str) -> pa.DataType:
    """Arrow type for the Spark SQL types sluice's tables use (no SparkContext needed)."""
    import pyarrow as pa

    simple = {"string": pa.string(), "bigint": pa.int64(), "int": pa.int32(),
              "boolean": pa.bool_(), "double": pa.float64(), "float": pa.float32(),
              "binary": pa.binary(), "timestamp": pa.timestamp("us", tz="UTC"),
              "date": pa.date32()}
    if spark_type in simple:
        return simple[spark_type]
    if spark_type.startswith("decimal("):
        precision, scale = spark_type[len("decimal("):-1].split(",")
        return pa.decimal128(int(precision), int(scale))
    if spark_type.startswith("array<"):
        return pa.list_(arrow_type(spark_type[len("array<"):-1]))
    raise ValueError(f"no Arrow type for Spark type {spark_type}")


def arrow_schema(columns: tuple[tuple[str, str], ...] | list[tuple[str, str]]) -> pa.Schema:
    import pyarrow as pa

    return pa.schema([pa.field(n, arrow_type(t)) for n, t in columns])


def raw_coordinates(partition: int, offsets: list[int], timestamps: pa.Array, batch_id: int,
                    ingested_at_us: int) -> dict[str, pa.Array]:
    """The raw columns sluice adds after the changelog's (``RAW_META_COLUMNS`` from
    ``_kafka_partition`` on), by name: where each row came from (a Kafka partition and
    offsets, or a file's index and record numbers), ``timestamps`` (UTC microseconds), its
    batch, when it landed, and no replay. One place for every source's raw rows."""
    import pyarrow as pa

    n = len(offsets)
    utc_us = pa.timestamp("us", tz="UTC")
    return {
        "_kafka_partition": pa.array([partition] * n, pa.int32()),
        "_kafka_offset": pa.array(offsets, pa.int64()),
        "_kafka_timestamp": timestamps,
        "_batch_id": pa.array([batch_id] * n, pa.int64()),
        "_ingested_at": pa.array([ingested_at_us] * n, pa.int64()).cast(utc_us),
        "_replay_of": pa.nulls(n, pa.string()),
    }


_ADDRESS = re.compile(r" at 0x[0-9a-f]+")
CHANGELOG_COLUMNS = 8  # _row_key .. _data_center: the first RAW_META_COLUMNS from the message


# Milliseconds that still fit a timestamp's microseconds (a signed 64-bit count): a value
# beyond overflows the conversion and has no raw value. Dates and microseconds convert as they
# are, whatever the year: the tap's zero-date policy (docs/types.md) lands days far before
# 0001-01-01 on purpose, and Spark holds them (Python's datetime cannot: read such columns
# in SQL, e.g. cast to string or unix_date, rather than with collect()).
_MS_LIMIT = (2**63 - 1) // 1000


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _column(field: pa.Field, values: list[Any], bad: dict[int, str]) -> pa.Array:
    """One transport column; a value Arrow rejects (e.g. a decimal beyond its precision) is
    nulled and its row flagged naming the column. Only after the whole chunk failed."""
    import pyarrow as pa

    try:
        return pa.array(values, field.type)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass
    for index, value in enumerate(values):
        try:
            pa.array([value], field.type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            bad.setdefault(index, f"column '{field.name}': {_shown(value)} does not fit "
                           f"{field.type}: {type(exc).__name__}: {exc}")
            values[index] = None
    return pa.array(values, field.type)


def _in_range(column: pa.Array, name: str, bad: dict[int, str]) -> pa.Array:
    """A plain time column in milliseconds since the epoch with values that overflow a
    timestamp's microseconds nulled and their rows flagged."""
    import pyarrow as pa
    import pyarrow.compute as pc

    outside = pc.or_(pc.less(column, -_MS_LIMIT), pc.greater(column, _MS_LIMIT))
    if not pc.any(outside).as_py():
        return column
    for index in pc.indices_nonzero(pc.fill_null(outside, False)).to_pylist():
        bad.setdefault(index, f"column '{name}': {column[index].as_py()} "
                       "milliseconds since 1970-01-01 overflows a timestamp "
                       "(microseconds in a signed 64-bit count)")
    return pc.if_else(outside, pa.scalar(None, column.type), column)


class Decoder:
    """Decodes message values: Avro per message, then whole chunks column-wise with Arrow."""

    def __init__(self, schema: ChangelogSchema) -> None:
        self.schema = schema
        self.debezium = schema.debezium  # Debezium envelopes, flattened after decoding
        # the snapshot reads before the message decoded next, in its partition (a read task
        # sets them per work unit: changelog/debezium_ordering.py)
        self.bounds = debezium.ReadBound()
        # a Debezium job decodes its envelopes, read with the newest one (changelog/debezium.py)
        self._strip = _strip_logical if schema.envelope is None else debezium.strip_logical
        self._json = debezium.JsonReader(schema.debezium, schema.avro) if (
            schema.debezium is not None and schema.debezium.encoding == "json") else None
        reader = _strip_logical(schema.avro) if schema.envelope is None else schema.envelope
        self._reader_schema = reader
        self.reader = fastavro.parse_schema(reader)
        # Pass no reader schema when the writer is the reader: schema resolution is slow.
        self.writers = {sid: (fastavro.parse_schema(self._strip(w)),
                              None if self._strip(w) == reader else self.reader)
                        for sid, w in schema.writer_schemas.items()}
        self._missing: dict[int, str] = {}  # unknown ids (registry read once): reason
        fields = {f["name"]: f["type"] for f in schema.avro["fields"]}
        self.units = _plain_units(schema.avro)
        # Millisecond columns checked before their conversion to microseconds can overflow.
        self.ms_columns = [name for name, unit in self.units.items() if unit == "ms"]
        if ("_event_ts" in fields and "_event_ts" not in self.units
                and spark_type(fields["_event_ts"], "_event_ts") == "bigint"):
            self.ms_columns.append("_event_ts")
        self.columns = schema.payload + RAW_META_COLUMNS[:CHANGELOG_COLUMNS]
        self.output = arrow_schema(self.columns)
        # What fastavro hands over, before the column-wise conversions.
        self.transport = arrow_schema([
            (name, "bigint" if name in self.units and self.units[name] != "date"
             else "int" if name in self.units else spark_type(t, name))
            for name, t in fields.items()])

    def record(self, value: bytes | None) -> dict[str, Any]:
        """Decode one message value to its Avro record (raises DecodeError). The hot path."""
        if not value:
            raise DecodeError("empty message value (tombstone or null)")
        if self._json is not None:  # each message read by its own schema (debezium_json.py)
            return self._json.record(value, self.bounds)
        buffer = io.BytesIO(value)
        if self.schema.confluent:
            writer, reader = self._writer_of(value)
            buffer.seek(5)
        else:
            writer, reader = self.reader, None
        try:
            record = fastavro.schemaless_reader(buffer, writer, reader)
        except Exception as exc:  # fastavro raises many types on corrupt input
            # no object addresses ("<_io.BytesIO object at 0x7f...>"): one reason per cause,
            # so that `sluice errors` groups alike failures together
            text = _ADDRESS.sub("", str(exc))
            raise DecodeError(f"Avro decode failed: {type(exc).__name__}: {text}") from None
        if buffer.tell() != len(value):
            raise DecodeError(f"Avro decode left {len(value) - buffer.tell()} trailing bytes: "
                              "the message does not match the job's schema")
        if self.debezium is not None:
            return debezium.flatten(record, self.debezium,  # type: ignore[arg-type]
                                    self.bounds)
        return record  # type: ignore[return-value]  # a record schema decodes to a dict

    def _writer_of(self, value: bytes) -> tuple[Any, Any]:
        if len(value) < 5 or value[0] != CONFLUENT_MAGIC:
            raise DecodeError("not in Confluent wire format (magic byte 0 + 4-byte schema id)")
        sid = int.from_bytes(value[1:5], "big")
        if sid not in self.writers and not self._registered_since(sid):
            raise DecodeError(self._missing[sid])
        return self.writers[sid]

    def _registered_since(self, sid: int) -> bool:
        """Look for ``<sid>.avsc`` in the registry folder once per unknown id: a version
        registered after the run loaded its schemas is used, not called undecodable."""
        if sid in self._missing:
            return False
        self._missing[sid] = (f"unknown schema id {sid}: add it to the job's schema_ids or "
                              "schema_registry")
        if self.schema.http_registry is not None:
            return self._fetched(sid, self.schema.http_registry)
        if self.schema.registry is None:
            return False
        file = Path(self.schema.registry) / f"{sid}.avsc"
        try:
            writer = _strip_logical(json.loads(file.read_text()))
            parsed = fastavro.parse_schema(writer)
        except FileNotFoundError:
            return False
        except Exception as exc:  # a broken file: every message of that id is an error row
            self._missing[sid] = (f"schema id {sid}: {file} is not a valid Avro schema: "
                                  f"{type(exc).__name__}: {exc}")
            return False
        del self._missing[sid]
        self.writers[sid] = (parsed, None if writer == self._reader_schema else self.reader)
        return True

    def _fetched(self, sid: int, registry: RegistryClient) -> bool:
        """Fetch id ``sid`` from the Schema Registry (once per process: registry.py); an id the
        registry lacks is an error row naming it; a registry gone fails the task (raises)."""
        found = registry.schema(sid)
        if found is None:
            self._missing[sid] = (f"unknown schema id {sid}: the schema registry at "
                                  f"{registry.shown_url} has no schema with that id")
            return False
        if self.debezium is not None and self.schema.envelope is not None:  # no column lost
            debezium.check_writer(sid, found, self.schema.envelope, self.writers, self.debezium)
        try:
            writer = self._strip(found)
            parsed = fastavro.parse_schema(writer)
        except Exception as exc:  # noqa: BLE001  # every message of that id is an error row
            self._missing[sid] = (f"schema id {sid} from {registry.shown_url} is not a valid "
                                  f"Avro schema: {type(exc).__name__}: {exc}")
            return False
        del self._missing[sid]
        self.writers[sid] = (parsed, None if writer == self._reader_schema else self.reader)
        return True

    def to_arrow(self, records: list[dict[str, Any]]) -> tuple[pa.RecordBatch, dict[int, str]]:
        """Changelog columns for decoded records, and the rows that cannot be raw rows.

        Returns the batch (payload columns, then _row_key .. _data_center) and a map from row
        index to the reason for rows that cannot be raw rows: a missing row key or ref key, or
        one value that has no raw value (a decimal beyond its precision, a timestamp or date
        outside 0001-01-01..9999-12-31, a key that cannot be text). Such a value is null in the
        batch; the row's other values convert as usual, so one bad value costs one row.
        """
        import pyarrow as pa
        import pyarrow.compute as pc

        bad: dict[int, str] = {}
        columns = self._transport(records, bad)

        def flag(column: pa.Array, reason: str) -> None:
            if column.null_count:
                for index in pc.indices_nonzero(pc.is_null(column)).to_pylist():
                    bad.setdefault(index, reason)

        for name in self.schema.row_key:
            flag(columns[name], f"row key column '{name}' is null")
        flag(columns[self.schema.ref_key], f"ref key '{self.schema.ref_key}' is null")
        row_key = self._row_key(columns, bad)
        if self.schema.empty_key:  # never empty (changelog/keys.py)
            row_key = row_key_column(row_key)
        n = len(records)
        arrays = [self._convert(columns, name) for name, _ in self.schema.payload]
        arrays += [
            row_key,
            pc.cast(columns[self.schema.ref_key], pa.int64()),
            self._optional(columns, "_changed_columns", n),
            self._optional(columns, "_source", n),
            self._optional(columns, "_event_ts", n),
            pc.fill_null(self._optional(columns, "_is_deleted", n), False),
            pc.fill_null(self._optional(columns, "_force_update", n), False),
            self._optional(columns, "_data_center", n),
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.output), bad

    def _transport(self, records: list[dict[str, Any]],
                   bad: dict[int, str]) -> dict[str, pa.Array]:
        """The decoded records column-wise; a value Arrow cannot hold (or out of range) is
        nulled and its row flagged with the column and the reason."""
        import pyarrow as pa

        try:
            decoded = pa.RecordBatch.from_pylist(records, schema=self.transport)
            columns = dict(zip(decoded.schema.names, decoded.columns, strict=True))
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            columns = {f.name: _column(f, [r.get(f.name) for r in records], bad)
                       for f in self.transport}
        for name in self.ms_columns:
            columns[name] = _in_range(columns[name], name, bad)
        return columns

    def _row_key(self, columns: dict[str, pa.Array], bad: dict[int, str]) -> pa.Array:
        """``_row_key``: the key column's text; a composite key's texts joined with '|' or,
        when a column is text or bytes (row_key_encoding json), their JSON list (injective)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        texts = []
        for name in self.schema.row_key:
            column = columns[name]
            if pa.types.is_binary(column.type):
                texts.append(self._bytes_key(column, name, bad))
            else:
                texts.append(pc.cast(self._convert(columns, name), pa.string()))
        if len(texts) == 1:
            return texts[0]
        if self.schema.row_key_encoding != JOINED and self.schema.keyed_differently():
            rows = zip(*(t.to_pylist() for t in texts), strict=True)
            return pa.array([json.dumps(list(r), ensure_ascii=False) for r in rows], pa.string())
        return pc.binary_join_element_wise(*texts, KEY_SEPARATOR)

    def _bytes_key(self, column: pa.Array, name: str, bad: dict[int, str]) -> pa.Array:
        """A bytes key column as text: lowercase hex (json), or the bytes as UTF-8 text (joined:
        bytes that are not UTF-8 cost their row)."""
        import pyarrow as pa

        values = column.to_pylist()
        if self.schema.row_key_encoding != JOINED:
            return pa.array([None if v is None else v.hex() for v in values], pa.string())
        texts: list[str | None] = []
        for index, value in enumerate(values):
            try:
                texts.append(None if value is None else value.decode("utf-8"))
            except UnicodeDecodeError:
                bad.setdefault(index, f"row key column '{name}': its bytes are not UTF-8 text, "
                               "which row_key_encoding 'joined' needs (the default, 'json', "
                               "keys bytes by their hex)")
                texts.append(None)
        return pa.array(texts, pa.string())

    def _convert(self, columns: dict[str, pa.Array], name: str) -> pa.Array:
        import pyarrow as pa

        column = columns[name]
        unit = self.units.get(name)
        if unit == "date":
            return column.cast(pa.date32())
        if unit:
            return column.cast(pa.timestamp(unit, tz="UTC")).cast(pa.timestamp("us", tz="UTC"))
        return column

    def _optional(self, columns: dict[str, pa.Array], name: str, n: int) -> pa.Array:
        """An envelope column, converted to its raw type; all null when the schema lacks it."""
        import pyarrow as pa

        target = self.output.field(name).type
        if name not in columns:
            return pa.nulls(n, target)
        column = columns[name]
        if name == "_event_ts" and name not in self.units:  # plain long milliseconds
            return column.cast(pa.int64()).cast(pa.timestamp("ms", tz="UTC")).cast(target)
        return self._convert(columns, name).cast(target)

    def decode(self, value: bytes | None) -> dict[str, Any]:
        """Decode one message to its changelog row (for tests and tools; tasks use chunks)."""
        batch, bad = self.to_arrow([self.record(value)])
        if bad:
            raise DecodeError(bad[0])
        return dict(batch.to_pylist()[0])
