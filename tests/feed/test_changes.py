"""``sluice changes``: the change feed read from a history table (python_ingest/feed/)."""

from __future__ import annotations

import datetime as dt
import io
import json
from pathlib import Path
from typing import Any

import pytest

from python_ingest.cli.changes import print_table
from python_ingest.exceptions import SluiceError
from python_ingest.feed.changes import Change, Point, check_range, parse_point, read_changes
from tests.feed.history_rows import at, build_three_batches, merge_on_read_files

pytestmark = pytest.mark.history


def test_points_are_batch_ids_or_iso_times_in_utc() -> None:
    assert parse_point("12") == Point(batch=12)
    assert parse_point("2026-03-01") == Point(time=dt.datetime(2026, 3, 1))
    assert parse_point("2026-03-01T09:30:00+01:00") == Point(time=dt.datetime(2026, 3, 1, 8, 30))
    assert parse_point("2026-03-01T08:30:00Z") == Point(time=dt.datetime(2026, 3, 1, 8, 30))
    with pytest.raises(SluiceError, match="neither a batch id"):
        parse_point("yesterday")
    check_range(Point(batch=3), Point(batch=3))
    with pytest.raises(SluiceError, match="--until batch 2 lies before --since batch 3"):
        check_range(Point(batch=3), Point(batch=2))


def test_json_and_table_lines_of_an_update_show_both_images() -> None:
    from decimal import Decimal

    update = Change("update", "7", 20, dt.datetime(2026, 3, 1, 9), 2,
                    {"trip_id": 7, "fare_amount": Decimal("15.00"), "city_name": "Bern"},
                    {"trip_id": 7, "fare_amount": Decimal("20.50"), "city_name": "Bern"})
    assert json.loads(update.as_json()) == {
        "op": "update", "key": "7", "ref_key": 20, "event_ts": "2026-03-01T09:00:00",
        "batch_id": 2, "before": {"trip_id": 7, "fare_amount": "15.00", "city_name": "Bern"},
        "after": {"trip_id": 7, "fare_amount": "20.50", "city_name": "Bern"}}
    assert update.summary() == "fare_amount: 15.00 -> 20.50"  # only what changed
    out = io.StringIO()
    delete = Change("delete", "8", 21, None, 2, {"trip_id": 8}, None)
    assert print_table([update, delete], out) == {"insert": 0, "update": 1, "delete": 1}
    lines = out.getvalue().splitlines()
    assert lines[0].split()[:2] == ["op", "key"] and "was trip_id=8" in lines[2]


def _feed(spark: Any, table: str, since: str, until: str | None = None) -> list[tuple[Any, ...]]:
    """(op, key, ref key, batch, before fare, after fare) per change, in feed order."""
    def fare(image: dict[str, Any] | None) -> float | None:
        return None if image is None or image["fare_amount"] is None \
            else float(image["fare_amount"])

    return [(c.op, c.key, c.ref_key, c.batch_id, fare(c.before), fare(c.after))
            for c in read_changes(spark, table, parse_point(since),
                                  parse_point(until) if until else None)]


def test_inserts_updates_deletes_by_batch_and_by_time_on_merge_on_read_tables(
        format_spark: Any, table_format: str, job_name: str, workdir: Path) -> None:
    """Both formats, with every closing of a version still in a Hudi log file or an Iceberg
    delete file: the feed reads them (a snapshot read), so nothing is missed."""
    spark = format_spark
    table = f"lake.{job_name}__history"
    build_three_batches(spark, table, table_format)
    assert merge_on_read_files(spark, table, table_format) > 0  # nothing compacted
    _same_without_a_jvm(spark, table, table_format, workdir)

    # batch 2: the update's before image is the source's row before it: the late change
    # (ref 15, batch 3) spliced in; trip 3's invalidation (ref 22) opened no version: found by
    # the version it closed
    assert _feed(spark, table, "2", "2") == [
        ("update", "1", 20, 2, 15.0, 20.0), ("delete", "2", 21, 2, 11.0, None),
        ("delete", "3", 22, 2, 12.0, None)]
    assert _feed(spark, table, "3") == [  # --until: the newest batch
        ("update", "1", 15, 3, 10.0, 15.0), ("insert", "2", 31, 3, None, 31.0),
        ("insert", "4", 32, 3, None, 32.0)]
    # by source commit time: the invalidation at its time
    assert _feed(spark, table, at(60).isoformat(), at(120).isoformat()) == [
        ("update", "1", 20, 2, 15.0, 20.0), ("delete", "2", 21, 2, 11.0, None),
        ("delete", "3", 22, 2, 12.0, None)]
    if table_format == "hudi":  # the rest reads the same files as above: once is enough
        from python_ingest.runtime.catalog import location

        # a reader of the base files alone would take trip 1's first version for current
        base = (spark.read.format("hudi").option("hoodie.datasource.query.type", "read_optimized")
                .load(location(spark, table)).where("_row_key = '1' and _ref_key = 10"))
        assert [r["_is_current"] for r in base.collect()] == [True]
        return
    assert _feed(spark, table, "1", "1") == [
        ("insert", "1", 10, 1, None, 10.0), ("insert", "2", 11, 1, None, 11.0),
        ("insert", "3", 12, 1, None, 12.0)]
    # the late change in its own place by time
    assert _feed(spark, table, at(15).isoformat(), at(59).isoformat()) == [
        ("update", "1", 15, 3, 10.0, 15.0)]

    # what `sluice demo` prints of a history table
    from python_ingest.demo.history import show_history
    from python_ingest.tables.names import JobModels, JobTables

    lines: list[str] = []
    assert show_history(spark, JobTables(job_name, JobModels("stg", job_name)), lines.append)
    assert f"{table}: 8 versions of 4 trips (3 current)" in lines[0]
    assert "what batch 3 changed: 2 inserts, 1 updates" in lines[1]
    assert lines[-1] == f"  all of it: sluice changes {job_name} --since 3 [--json]"


def _same_without_a_jvm(spark: Any, table: str, table_format: str, workdir: Path) -> None:
    """The feed read by hudi-rs or pyiceberg (tables/native.py, feed/rows.py) is Spark's,
    change for change (images, types and order), over every kind of range."""
    from python_ingest.config.catalog import CatalogConfig
    from python_ingest.feed.rows import native_changes
    from python_ingest.tables.native import NativeLake
    from tests.conftest import warehouse_of

    lake = NativeLake(warehouse_of(workdir, table_format), table_format, CatalogConfig())
    assert lake.exists(table) and not lake.exists(table + "_none")
    for since, until in (("1", None), ("2", "2"), ("3", None), ("4", None),
                         (at(60).isoformat(), at(120).isoformat()), (at(15).isoformat(), None)):
        start, end = parse_point(since), parse_point(until) if until else None
        through_spark = list(read_changes(spark, table, start, end))
        assert native_changes(lake, table, start, end) == through_spark, (since, until)
    assert len(native_changes(lake, table, parse_point("1"))) == 9


def test_a_job_without_history_is_told_how_to_turn_it_on(
        spark: Any, project: Any, make_settings: Any, job_name: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from python_ingest.cli.main import main
    from tests.conftest import trips_job

    project(job_name)
    make_settings({job_name: trips_job(job_name)})
    code = main(["--config", str(tmp_path / "sluice.yml"), "changes", job_name, "--since", "1"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"job {job_name} has no history table (lake.{job_name}__history" in err
    assert "config(history=true)" in err and f"sluice run {job_name}" in err
