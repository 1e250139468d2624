"""Decoding one changelog message (Avro, plain or Confluent-framed) into a raw row.

Decoding runs inside Spark tasks, so everything here is plain Python and picklable.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import fastavro

from python_ingest.changelog.schema import (
    CONFLUENT_MAGIC,
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
    if isinstance(avro_type, list):
        return [_strip_logical(t) for t in avro_type]
    if isinstance(avro_type, dict):
        if avro_type.get("logicalType") in _PLAIN_LOGICAL:
            return avro_type["type"]
        if avro_type.get("type") == "record":
            return {**avro_type, "fields": [{**f, "type": _strip_logical(f["type"])}
                                            for f in avro_type["fields"]]}
        if avro_type.get("type") == "array":
            return {**avro_type, "items": _strip_logical(avro_type["items"])}
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


CHANGELOG_COLUMNS = 8  # _row_key .. _data_center: the first RAW_META_COLUMNS from the message


class Decoder:
    """Decodes message values: Avro per message, then whole chunks column-wise with Arrow."""

    def __init__(self, schema: ChangelogSchema) -> None:
        self.schema = schema
        reader = _strip_logical(schema.avro)
        self.reader = fastavro.parse_schema(reader)
        # Pass no reader schema when the writer is the reader: schema resolution is slow.
        self.writers = {sid: (fastavro.parse_schema(_strip_logical(w)),
                              None if _strip_logical(w) == reader else self.reader)
                        for sid, w in schema.writer_schemas.items()}
        self._missing: dict[int, str] = {}  # unknown ids (registry read once): reason
        self.units = _plain_units(schema.avro)
        self.columns = schema.payload + RAW_META_COLUMNS[:CHANGELOG_COLUMNS]
        self.output = arrow_schema(self.columns)
        fields = {f["name"]: f["type"] for f in schema.avro["fields"]}
        # What fastavro hands over, before the column-wise conversions.
        self.transport = arrow_schema([
            (name, "bigint" if name in self.units and self.units[name] != "date"
             else "int" if name in self.units else spark_type(t, name))
            for name, t in fields.items()])

    def record(self, value: bytes | None) -> dict[str, Any]:
        """Decode one message value to its Avro record (raises DecodeError). The hot path."""
        if not value:
            raise DecodeError("empty message value (tombstone or null)")
        buffer = io.BytesIO(value)
        if self.schema.confluent:
            writer, reader = self._writer_of(value)
            buffer.seek(5)
        else:
            writer, reader = self.reader, None
        try:
            record = fastavro.schemaless_reader(buffer, writer, reader)
        except Exception as exc:  # fastavro raises many types on corrupt input
            raise DecodeError(f"Avro decode failed: {type(exc).__name__}: {exc}") from None
        if buffer.tell() != len(value):
            raise DecodeError(f"Avro decode left {len(value) - buffer.tell()} trailing bytes: "
                              "the message does not match the job's schema")
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
        self.writers[sid] = (parsed, None if writer == _strip_logical(self.schema.avro)
                             else self.reader)
        return True

    def to_arrow(self, records: list[dict[str, Any]]) -> tuple[pa.RecordBatch, dict[int, str]]:
        """Changelog columns for decoded records, and the rows that cannot be raw rows.

        Returns the batch (payload columns, then _row_key .. _data_center) and a map from row
        index to the reason for rows whose row key or ref key is missing.
        """
        import pyarrow as pa
        import pyarrow.compute as pc

        decoded = pa.RecordBatch.from_pylist(records, schema=self.transport)
        bad: dict[int, str] = {}

        def flag(column: pa.Array, reason: str) -> None:
            if column.null_count:
                for index in pc.indices_nonzero(pc.is_null(column)).to_pylist():
                    bad.setdefault(index, reason)

        keys = []
        for name in self.schema.row_key:
            flag(decoded.column(name), f"row key column '{name}' is null")
            keys.append(pc.cast(self._convert(decoded, name), pa.string()))
        flag(decoded.column(self.schema.ref_key), f"ref key '{self.schema.ref_key}' is null")
        row_key = keys[0] if len(keys) == 1 else pc.binary_join_element_wise(*keys, KEY_SEPARATOR)
        n = decoded.num_rows
        arrays = [self._convert(decoded, name) for name, _ in self.schema.payload]
        arrays += [
            row_key,
            pc.cast(decoded.column(self.schema.ref_key), pa.int64()),
            self._optional(decoded, "_changed_columns", n),
            self._optional(decoded, "_source", n),
            self._optional(decoded, "_event_ts", n),
            pc.fill_null(self._optional(decoded, "_is_deleted", n), False),
            pc.fill_null(self._optional(decoded, "_force_update", n), False),
            self._optional(decoded, "_data_center", n),
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.output), bad

    def _convert(self, decoded: pa.RecordBatch, name: str) -> pa.Array:
        import pyarrow as pa

        column = decoded.column(name)
        unit = self.units.get(name)
        if unit == "date":
            return column.cast(pa.date32())
        if unit:
            return column.cast(pa.timestamp(unit, tz="UTC")).cast(pa.timestamp("us", tz="UTC"))
        return column

    def _optional(self, decoded: pa.RecordBatch, name: str, n: int) -> pa.Array:
        """An envelope column, converted to its raw type; all null when the schema lacks it."""
        import pyarrow as pa

        target = self.output.field(name).type
        if name not in decoded.schema.names:
            return pa.nulls(n, target)
        column = decoded.column(name)
        if name == "_event_ts" and name not in self.units:  # plain long milliseconds
            return column.cast(pa.int64()).cast(pa.timestamp("ms", tz="UTC")).cast(target)
        return self._convert(decoded, name).cast(target)

    def decode(self, value: bytes | None) -> dict[str, Any]:
        """Decode one message to its changelog row (for tests and tools; tasks use chunks)."""
        batch, bad = self.to_arrow([self.record(value)])
        if bad:
            raise DecodeError(bad[0])
        return dict(batch.to_pylist()[0])
