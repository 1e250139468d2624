"""Reading one landed file into raw rows, with the job's schema and decoder.

A file holds changelog events with the fields of the job's Avro value schema (the row's
columns and the envelope fields, changelog/schema.py), as Avro container files, JSON lines,
CSV with a header row, or Parquet (by extension, partitions.FORMATS). Each record is brought
to the plain values a Kafka message's Avro decodes to (timestamps as integers in their unit,
dates as days, texts from CSV cast to the field's type) and goes through the same
``Decoder.to_arrow``, so the raw rows are exactly a Kafka job's.

A file that cannot be parsed as a whole (corrupt container, a line that is not a JSON
object, a CSV row with more fields than the header) becomes one error row naming the path;
a record that cannot be a raw row (a null key, a value that does not fit its column) becomes
its own error row, as with Kafka.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

import fastavro

from python_ingest.changelog.decode import Decoder
from python_ingest.changelog.schema import ChangelogSchema, spark_type
from python_ingest.exceptions import FileParseError
from python_ingest.sources.files.partitions import DataFile

if TYPE_CHECKING:
    import pyarrow as pa

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_UNITS = {"timestamp-millis": 1_000, "timestamp-micros": 1_000_000,
          "local-timestamp-millis": 1_000, "local-timestamp-micros": 1_000_000}
_TRUE, _FALSE = {"true", "1", "t", "yes"}, {"false", "0", "f", "no"}


@dataclass
class ParsedFile:
    """One file's changelog rows and error rows (its records numbered from 0)."""

    file: DataFile
    read: int = 0  # records, or 1 for a file that could not be parsed
    changelog: pa.RecordBatch | None = None  # payload columns, then _row_key .. _data_center
    offsets: list[int] = field(default_factory=list)  # record number of each changelog row
    errors: list[tuple[int | None, str, bytes | None]] = field(default_factory=list)


def _kind(avro_type: Any, name: str) -> str:
    """The value kind a field's records are brought to: a unit, 'date', or a Spark type."""
    branches = avro_type if isinstance(avro_type, list) else [avro_type]
    for t in branches:
        if isinstance(t, dict) and t.get("logicalType") in _UNITS:
            return f"ts:{_UNITS[t['logicalType']]}"
        if isinstance(t, dict) and t.get("logicalType") == "date":
            return "date"
    return spark_type(avro_type, name)


def _timestamp(value: Any, per_second: int) -> Any:
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit():
            return int(text)
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=UTC)
        delta = moment - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * per_second + \
            delta.microseconds * per_second // 1_000_000
    return value


def _date(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip()
        value = int(text) if text.lstrip("-").isdigit() else date.fromisoformat(text)
    if isinstance(value, datetime):
        value = value.date()
    if isinstance(value, date):
        return (value - _EPOCH.date()).days
    return value


def _plain(value: Any, kind: str) -> Any:
    """``value`` as the Avro decoder hands it over; left as it is when it does not convert
    (the decoder then flags its row, naming the column)."""
    if value is None:
        return None
    try:
        if kind.startswith("ts:"):
            return _timestamp(value, int(kind[3:]))
        if kind == "date":
            return _date(value)
        if kind in ("bigint", "int") and isinstance(value, str | float):
            number = float(value) if isinstance(value, float) else None
            return int(value) if number is None else (int(number) if number.is_integer()
                                                      else value)
        if kind in ("double", "float") and isinstance(value, str | int) \
                and not isinstance(value, bool):
            return float(value)
        if kind == "boolean" and isinstance(value, str):
            text = value.strip().lower()
            return True if text in _TRUE else False if text in _FALSE else value
        if kind == "binary" and isinstance(value, str):
            return value.encode("latin-1")  # Avro's JSON encoding of bytes
        if kind.startswith("decimal(") and not isinstance(value, Decimal):
            return Decimal(str(value))
        if kind.startswith("array<"):
            items = json.loads(value) if isinstance(value, str) else value
            return [_plain(v, kind[len("array<"):-1]) for v in items] \
                if isinstance(items, list) else value
    except (ValueError, TypeError, InvalidOperation, OverflowError):
        return value
    return value


def _avro(path: str) -> Iterator[dict[str, Any]]:
    with open(path, "rb") as handle:
        for record in fastavro.reader(handle):
            if not isinstance(record, dict):
                raise FileParseError("the container's schema is not a record")
            yield record


def _json_lines(path: str) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise FileParseError(f"line {number} is not JSON: {exc}") from None
            if not isinstance(record, dict):
                raise FileParseError(f"line {number} is not a JSON object")
            yield record


def _csv(path: str) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        if not reader.fieldnames:
            return
        for record in reader:
            if None in record:
                raise FileParseError(f"line {reader.line_num} has more fields than the header")
            yield {k: (None if v == "" else v) for k, v in record.items()}


def _parquet(path: str) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    yield from pq.read_table(path).to_pylist()


READERS: dict[str, Callable[[str], Iterator[dict[str, Any]]]] = {
    "avro": _avro, "json": _json_lines, "csv": _csv, "parquet": _parquet}


class FileReader:
    """Reads landed files of one job into changelog rows (one per run; keeps the decoder)."""

    def __init__(self, schema: ChangelogSchema) -> None:
        self.decoder = Decoder(schema)
        self.kinds = {f["name"]: _kind(f["type"], f["name"]) for f in schema.avro["fields"]}
        if "_event_ts" in self.kinds and self.kinds["_event_ts"] == "bigint":
            self.kinds["_event_ts"] = "ts:1000"  # plain long milliseconds

    def read(self, file: DataFile) -> ParsedFile:
        """Parse, convert and decode one file; never raises for the file's content."""
        parsed = ParsedFile(file)
        try:
            records = [{name: _plain(record.get(name), kind)
                        for name, kind in self.kinds.items()}
                       for record in READERS[file.format](file.path)]
        except FileParseError as exc:
            return self._unreadable(parsed, str(exc))
        except (OSError, ValueError, UnicodeDecodeError, EOFError, StopIteration) as exc:
            return self._unreadable(parsed, f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001  # fastavro/pyarrow raise many types
            return self._unreadable(parsed, f"{type(exc).__name__}: {exc}")
        parsed.read = len(records)
        if not records:
            return parsed
        offsets = list(range(len(records)))
        try:
            changelog, bad = self.decoder.to_arrow(records)
        except Exception:  # noqa: BLE001  # an input to_arrow does not foresee: isolate it
            keep = self._isolate(records, parsed)
            records, offsets = [records[i] for i in keep], [offsets[i] for i in keep]
            if not records:
                return parsed
            changelog, bad = self.decoder.to_arrow(records)
        parsed.errors += [(offsets[i], f"record {offsets[i]}: {reason}", _source(records[i]))
                          for i, reason in sorted(bad.items())]
        if bad:
            import pyarrow as pa

            changelog = changelog.filter(pa.array([i not in bad for i in range(len(records))]))
            offsets = [o for i, o in enumerate(offsets) if i not in bad]
        parsed.changelog, parsed.offsets = changelog, offsets
        return parsed

    def _isolate(self, records: list[dict[str, Any]], parsed: ParsedFile) -> list[int]:
        """The indices of records that convert on their own; the others become error rows."""
        keep = []
        for index, record in enumerate(records):
            try:
                self.decoder.to_arrow([record])
                keep.append(index)
            except Exception as exc:  # noqa: BLE001  # one record's fault, never the file's
                parsed.errors.append((index, f"record {index}: conversion failed: "
                                             f"{type(exc).__name__}: {exc}", _source(record)))
        return keep

    @staticmethod
    def _unreadable(parsed: ParsedFile, reason: str) -> ParsedFile:
        parsed.read = 1
        parsed.errors = [(None, f"cannot parse as {parsed.file.format}: {reason}", None)]
        return parsed


def _source(record: dict[str, Any]) -> bytes:
    """A record as JSON bytes, for the error row's error_source_data."""
    return json.dumps(record, default=str, sort_keys=True).encode("utf-8")
