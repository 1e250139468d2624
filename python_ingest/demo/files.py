"""Demo data for a files job: a landing dir of hourly partitions of trips changelog events.

``write_demo_partitions(root)`` writes ``<root>/landing/trips/dt=.../hour=.../part-*`` in each
format a files job reads (Avro container, JSON lines, CSV, Parquet), each partition closed
with a ``_SUCCESS`` marker, for a job such as::

    jobs:
      trips_files:
        source: files
        path: landing/trips
        schema: schemas/trips.avsc
        row_key: trip_id
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import fastavro

from python_ingest.sources.files.partitions import SUCCESS_MARKER

DEMO_LANDING = "landing/trips"
_CITIES = ("Amsterdam", "Berlin", "Lagos", "Austin")
_STATUSES = ("requested", "accepted", "completed")
_START = datetime(2026, 11, 23, 5, tzinfo=UTC)


def trip_records(first_trip_id: int, count: int, first_ref_key: int,
                 status: str = "requested") -> list[dict[str, Any]]:
    """``count`` changelog events of the trips schema (schemas/trips.avsc), one per trip,
    with ``_ref_key`` counting up from ``first_ref_key``."""
    records = []
    for i in range(count):
        trip_id = first_trip_id + i
        records.append({
            "trip_id": trip_id, "rider_id": 1000 + trip_id % 97,
            "driver_id": 500 + trip_id % 31, "city": _CITIES[trip_id % len(_CITIES)],
            "status": status, "fare": round(5 + trip_id % 40 * 1.25, 2),
            "distance_km": round(1 + trip_id % 13 * 0.5, 3),
            "requested_at": int((_START + timedelta(minutes=trip_id)).timestamp() * 1000),
            "_ref_key": first_ref_key + i, "_changed_columns": None, "_source": "demo-files",
            "_event_ts": int((_START + timedelta(minutes=trip_id)).timestamp() * 1000),
            "_is_deleted": False, "_force_update": False, "_data_center": "dc1",
        })
    return records


def write_file(path: Path, records: Sequence[dict[str, Any]], schema: dict[str, Any]) -> Path:
    """Write ``records`` to ``path`` in the format its extension names (partitions.FORMATS).

    Timestamps are written as the schema's integers (JSON, CSV) or as Avro/Parquet values;
    CSV holds arrays as JSON text and nulls as empty fields."""
    path.parent.mkdir(parents=True, exist_ok=True)
    suffix = path.suffix.lower()
    if suffix == ".avro":
        with open(path, "wb") as out:
            fastavro.writer(out, fastavro.parse_schema(schema), list(records))
    elif suffix in (".json", ".jsonl", ".ndjson"):
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    elif suffix == ".csv":
        names = [f["name"] for f in schema["fields"]]
        with open(path, "w", newline="") as out:
            writer = csv.writer(out)
            writer.writerow(names)
            for r in records:
                writer.writerow(["" if r.get(n) is None else json.dumps(r[n])
                                 if isinstance(r.get(n), list) else r[n] for n in names])
    elif suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(list(records)), path)
    else:
        raise ValueError(f"no demo writer for {path.name}")
    return path


def _schema(root: Path) -> dict[str, Any]:
    from python_ingest.runtime.jars import repo_root

    path = root / "schemas" / "trips.avsc"
    if not path.is_file():
        path = repo_root() / "schemas" / "trips.avsc"
    loaded = json.loads(path.read_text())
    assert isinstance(loaded, dict)
    return loaded


def demo_partition_keys(hours: int) -> Iterator[str]:
    for hour in range(hours):
        at = _START + timedelta(hours=hour)
        yield f"dt={at:%Y-%m-%d}/hour={at:%H}"


def write_demo_partitions(root: Path, hours: int = 4, rows_per_file: int = 25) -> Path:
    """Write the demo landing dir under ``root`` (``root/landing/trips``): ``hours`` hourly
    partitions, one file per format in turn, each with a ``_SUCCESS`` marker. Returns the
    landing dir. Later hours update the trips of earlier ones (status accepted)."""
    schema = _schema(root)
    landing = root / DEMO_LANDING
    suffixes = (".avro", ".json", ".csv", ".parquet")
    for hour, key in enumerate(demo_partition_keys(hours)):
        first = 1 + (hour // 2) * rows_per_file
        status = _STATUSES[hour % 2]
        records = trip_records(first, rows_per_file, hour * rows_per_file + 1, status)
        write_file(landing / key / f"part-00000{suffixes[hour % len(suffixes)]}", records,
                   schema)
        (landing / key / SUCCESS_MARKER).touch()
    return landing
