"""Helpers for pipeline tests: events built from plain dicts, and the dict oracle."""

from __future__ import annotations

import io
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro

from tests.conftest import REPO

COLUMNS = ("trip_id", "rider_id", "driver_id", "city", "status", "fare", "distance_km")


def schema() -> Any:
    import json

    return fastavro.parse_schema(json.loads((REPO / "schemas" / "trips.avsc").read_text()))


def encode(parsed: Any, record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, record)
    return out.getvalue()


def lake_rows(spark: Any, table: str, tombstones: bool = False) -> dict[int, dict[str, Any]]:
    """The lake table's live rows as {trip_id: source-named columns} for comparison with an
    oracle; a lake without ``tombstones`` (keep_tombstones) holds no others."""
    rows = spark.sql(f"select trip_id, rider_id, driver_id, city_name, trip_status, "
                     f"fare_amount, distance_km, _is_deleted from {table}").collect()
    out = {}
    for r in rows:
        if tombstones and r["_is_deleted"]:
            continue
        assert r["_is_deleted"] is False
        out[r["trip_id"]] = {
            "trip_id": r["trip_id"], "rider_id": r["rider_id"], "driver_id": r["driver_id"],
            "city": r["city_name"], "status": r["trip_status"],
            "fare": None if r["fare_amount"] is None else float(r["fare_amount"]),
            "distance_km": None if r["distance_km"] is None else float(r["distance_km"]),
        }
    return out


def as_lake(row: dict[str, Any]) -> dict[str, Any]:
    """A source row as the converter would turn it (for oracle comparison)."""
    def money(value: Any, places: str) -> Any:
        return None if value is None else float(Decimal(str(value)).quantize(Decimal(places)))

    return {"trip_id": row["trip_id"], "rider_id": row.get("rider_id"),
            "driver_id": row.get("driver_id"),
            "city": None if row.get("city") is None else row["city"].strip().title(),
            "status": None if row.get("status") is None else row["status"].strip().lower(),
            "fare": money(row.get("fare"), "0.01"),
            "distance_km": money(row.get("distance_km"), "0.001")}


def index_state(spark: Any, tables: Any) -> dict[str, tuple[int, bool]]:
    """Each key's newest index entry: (ref key, deleted), as a reader of the index sees it:
    with the entries of the batches whose lake commits carry them (steps/merge/index.py)."""
    from python_ingest.steps.merge import index_cache

    index_cache.complete(spark, tables)
    return {r[0]: (int(r[1]), bool(r[2])) for r in spark.sql(f"""
        select _row_key, max_by(_ref_key, _batch_id), max_by(_is_deleted, _batch_id)
        from {tables.index} group by _row_key""").collect()}


def assert_index_agrees(spark: Any, tables: Any) -> dict[str, tuple[int, bool]]:
    """Every live lake row's key has the row's ref key as newest entry, a live one; every
    other key's newest entry is a delete (a deleted row the lake keeps, keep_tombstones: with
    the row's ref key)."""
    state = index_state(spark, tables)
    rows = spark.sql(f"select _row_key, _ref_key, coalesce(_is_deleted, false) "
                     f"from {tables.lake}").collect()
    live = {r[0]: int(r[1]) for r in rows if not r[2]}
    assert {k: ref for k, (ref, deleted) in state.items() if not deleted} == live
    kept = {r[0]: (int(r[1]), True) for r in rows if r[2]}
    assert {k: state.get(k) for k in kept} == kept
    return state


def configure_lake(lake_sql: Path, settings: str) -> None:
    """The lake model's config() call, with ``settings`` after keep_tombstones."""
    text = lake_sql.read_text()
    start = text.index("{{ config(")
    end = text.index(") }}", start) + len(") }}")
    lake_sql.write_text(text[:start] + f"{{{{ config(keep_tombstones=false{settings}) }}}}"
                        + text[end:])
