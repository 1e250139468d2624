"""The central property: after any sequence of batches, the lake table equals a dict to which
the same events were applied one by one (duplicates, reordering across batches, partial
updates, deletes, force updates), through the real pipeline (broker, Spark, Iceberg, dbt, GE).

The oracle is deliberately sequential and naive: batches in arrival order; inside a batch,
events in ref-key order; an event applies when its ref key is newer than the row's current
one (or the row's tombstone's) or it is forced; a partial update of a row that does not exist
is rejected. The SQL merge computes the same thing in closed form, from the global index
(meta.<job>__index), which the table services compact mid-stream.

An example is several source tables' streams at once, each on its own keys: a pipeline run
takes every stream's next batch, so one run tests them all (a run is what costs; the oracle
of disjoint keys is the union of each stream's).
"""

from __future__ import annotations

import datetime as dt
import itertools
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from python_ingest.demo.trips import Event, produce
from python_ingest.kafka import broker as broker_mod
from python_ingest.steps.dbt import Dbt
from python_ingest.steps.pipeline import run_job
from python_ingest.steps.services import maintain_job
from tests.conftest import trips_job
from tests.steps.helpers import (
    as_lake,
    assert_index_agrees,
    configure_lake,
    encode,
    lake_rows,
    schema,
)

KEYS_PER_STREAM = 5
# the parametrization whose lake model keeps a history (issue #52 item 6): checked too
HISTORY_FORMAT = "hudi"
T0_MS = 1_772_352_000_000  # 2026-03-01 08:00 UTC: the source's commit times, from here
STREAMS_PER_EXAMPLE = 5
_stream = itertools.count(1)
_ref = itertools.count(1_000)
CITIES = ("berlin", "lagos", "austin")
STATUSES = ("requested", "accepted", "completed", "cancelled")
PARTIAL_COLUMNS = ("rider_id", "city", "status", "fare")


@dataclass(frozen=True)
class Change:
    """One changelog event as the oracle sees it."""

    trip_id: int
    ref: int
    kind: str  # full, partial, delete
    values: dict[str, Any]
    changed: tuple[str, ...] | None
    force: bool


def values_strategy() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({
        "rider_id": st.integers(1, 50),
        "driver_id": st.one_of(st.none(), st.integers(1, 9)),
        "city": st.sampled_from(CITIES),
        "status": st.sampled_from(STATUSES),
        "fare": st.integers(100, 9_999).map(lambda cents: cents / 100),
        "distance_km": st.integers(1, 50_000).map(lambda m: m / 1000),
    })


@st.composite
def streams(draw: Any) -> tuple[list[list[Change]], int]:
    """A source table's changelog (ref keys increasing), then delivered: duplicated, forced
    re-deliveries, split into batches in random order."""
    base = next(_stream) * 100
    log: list[Change] = []
    exists: dict[int, bool] = {}
    for _ in range(draw(st.integers(3, 18))):
        trip_id = base + draw(st.integers(1, KEYS_PER_STREAM))
        ref = next(_ref)
        if not exists.get(trip_id):
            log.append(Change(trip_id, ref, "full", draw(values_strategy()), None, False))
            exists[trip_id] = True
            continue
        kind = draw(st.sampled_from(("full", "partial", "partial", "delete")))
        if kind == "delete":
            exists[trip_id] = False
            log.append(Change(trip_id, ref, "delete", draw(values_strategy()), None, False))
        elif kind == "full":
            log.append(Change(trip_id, ref, "full", draw(values_strategy()), None, False))
        else:
            changed = tuple(sorted(draw(st.sets(st.sampled_from(PARTIAL_COLUMNS), min_size=1))))
            values = draw(values_strategy())
            log.append(Change(trip_id, ref, "partial", {c: values[c] for c in changed},
                              changed, False))
    delivered = list(log)
    for change in log:  # at-least-once: some events twice; some re-sent as force updates
        if draw(st.integers(0, 9)) == 0:
            delivered.append(change)
        if change.kind != "partial" and draw(st.integers(0, 14)) == 0:
            delivered.append(Change(change.trip_id, change.ref, change.kind,
                                    change.values, change.changed, True))
    batches = draw(st.integers(1, 3))
    split: list[list[Change]] = [[] for _ in range(batches)]
    for change in delivered:
        split[draw(st.integers(0, batches - 1))].append(change)
    # order inside a batch must not matter
    split = [draw(st.permutations(batch)) for batch in split]
    return [b for b in split if b], base


@st.composite
def examples(draw: Any) -> tuple[list[list[Change]], list[int]]:
    """STREAMS_PER_EXAMPLE streams on disjoint keys, delivered together: a stream's i-th
    batch goes in the i-th pipeline run; returns the runs' batches and the streams' bases."""
    streams_ = [draw(streams()) for _ in range(STREAMS_PER_EXAMPLE)]
    runs = max(len(batches) for batches, _ in streams_)
    together = [[c for batches, _ in streams_ if i < len(batches) for c in batches[i]]
                for i in range(runs)]
    return together, [base for _, base in streams_]


def oracle(batches: list[list[Change]]) -> tuple[dict[int, dict[str, Any]], int]:
    """Apply the batches one by one, each in ref-key order; returns rows and rejections."""
    state: dict[int, dict[str, Any]] = {}  # trip_id -> {live, ref, row}
    rejected = 0
    for batch in batches:
        unique: dict[tuple[int, int], Change] = {}
        for c in batch:  # duplicates count once; a forced copy wins
            if (c.trip_id, c.ref) not in unique or c.force:
                unique[(c.trip_id, c.ref)] = c
        for change in sorted(unique.values(), key=lambda c: c.ref):
            current = state.get(change.trip_id)
            if current is not None and not (change.ref > current["ref"] or change.force):
                continue
            if change.kind == "delete":
                state[change.trip_id] = {"live": False, "ref": change.ref, "row": None}
            elif change.kind == "full":
                state[change.trip_id] = {"live": True, "ref": change.ref,
                                         "row": {"trip_id": change.trip_id, **change.values}}
            elif current is None or not current["live"]:
                rejected += 1
            else:
                current["row"].update(change.values)
                current["ref"] = change.ref
    rows = {k: as_lake(v["row"]) for k, v in state.items() if v["live"]}
    return rows, rejected


def event_ms(ref: int) -> int:
    """A change's commit time at the source: seconds apart, sometimes backwards against
    ref-key order (as two sources' clocks, or a clock set back)."""
    return T0_MS + (ref * 37 % 101) * 1000


def to_event(parsed: Any, change: Change) -> Event:
    full = {"rider_id": None, "driver_id": None, "city": None, "status": None, "fare": None,
            "distance_km": None, **change.values}
    record = {"trip_id": change.trip_id, **full, "requested_at": None, "_ref_key": change.ref,
              "_changed_columns": list(change.changed) if change.changed else None,
              "_source": "oracle", "_event_ts": event_ms(change.ref),
              "_is_deleted": change.kind == "delete",
              "_force_update": change.force, "_data_center": "dc1"}
    return Event(str(change.trip_id).encode(), encode(parsed, record), change.kind, record)


@pytest.fixture
def oracle_job(broker: str, make_settings: Any, project: Any, job_name: str,
               table_format: str) -> tuple[Any, Any, Dbt]:
    root = project(job_name)
    if table_format == HISTORY_FORMAT:  # deletes as versions: the versions tile time
        configure_lake(root / "models" / "lake" / f"{job_name}.sql",
                       ", history=true, hard_deletes='new_record'")
    settings = make_settings({job_name: trips_job(job_name)}, table_format=table_format)
    broker_mod.ensure_topic(broker, job_name, 2)
    return settings, settings.job(job_name), Dbt(settings)


def assert_lake_equals_oracle(spark: Any, broker: str, job_tables: tuple[Any, Any, Dbt],
                              batches: list[list[Change]], bases: list[int],
                              maintain_after: int | None, tombstones: bool = False) -> Any:
    """Each batch through a pipeline run (the table services after batch ``maintain_after``),
    then the lake's rows of the streams ``bases`` equal the oracle's, the index agrees with the
    lake, and the rejected partial updates are in the error table; the job's tables."""
    settings_, job, dbt = job_tables
    parsed = schema()
    errors_before = spark.table(f"errors.{job.name}").where("error_step = 'merge'").count() \
        if spark.catalog.tableExists(f"errors.{job.name}") else 0
    for number, batch in enumerate(batches, 1):
        produce(broker, job.topic, iter(to_event(parsed, c) for c in batch))
        result = run_job(spark, settings_, job, dbt=dbt)
        assert result.counts["landed"] == len(batch)
        assert result.counts["valid"] == len(batch)
        if number == maintain_after:
            # table services mid-stream: the index compacted to one entry per key (delete
            # markers kept: within the retention), the lake compacted, cleaned, archived
            maintain_job(spark, dbt, job)
    assert result.tables is not None
    rejected = assert_lake_holds_oracle(spark, result.tables, batches, bases, tombstones)
    errors_after = spark.table(result.tables.errors).where("error_step = 'merge'").count()
    assert errors_after - errors_before == rejected
    return result.tables


def assert_lake_holds_oracle(spark: Any, tables: Any, batches: list[list[Change]],
                             bases: list[int], tombstones: bool = False) -> int:
    """The lake's live rows of the streams ``bases`` are the oracle's of ``batches``, and the
    index agrees with the lake; the number of partial updates the oracle rejected."""
    expected, rejected = oracle(batches)
    assert tables.lake is not None
    actual = {k: v for k, v in lake_rows(spark, tables.lake, tombstones).items()
              if any(base < k <= base + KEYS_PER_STREAM for base in bases)}
    assert actual == expected
    assert_index_agrees(spark, tables)
    return rejected


@pytest.mark.e2e
# two examples: Hypothesis's first is its simplest (each stream three full images of one key,
# each delivered twice and re-sent forced, in one batch), the second STREAMS_PER_EXAMPLE random
# streams (before: five examples of one stream each, a pipeline run per batch of each).
# print_blob: a failing example prints the @reproduce_failure line that replays it (random
# examples differ between runs, and there is no example database to replay from)
@settings(max_examples=2, deadline=None, database=None, print_blob=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(example=examples())
def test_lake_equals_oracle(format_spark: Any, broker: str, oracle_job: Any,
                            example: tuple[list[list[Change]], list[int]]) -> None:
    """On both table formats (the table_format fixture)."""
    batches, bases = example
    tables = assert_lake_equals_oracle(format_spark, broker, oracle_job, batches, bases,
                                       (len(batches) + 1) // 2 if len(batches) > 1 else None)
    if tables.history is not None and format_spark.catalog.tableExists(tables.history):
        assert_history_holds_oracle(format_spark, tables, batches, bases)


def assert_history_holds_oracle(spark: Any, tables: Any, batches: list[list[Change]],
                                bases: list[int]) -> None:
    """The history (issue #52) after the oracle's batches: every key's versions tile time
    without gap or overlap and its current versions are the lake's rows (the history tests'
    check); every version is one of the stream's changes, at its commit time at the source,
    with the values that change set (all of a full row's, a partial update's named ones)."""
    from python_ingest.runtime.catalog import kept_write_settings, location
    from tests.history.test_pipeline import _check

    # every later process registers it as created: the bucket index, no metadata table
    kept = kept_write_settings(spark, location(spark, tables.history))
    assert (kept["hoodie.index.type"], kept["hoodie.metadata.enable"]) == ("BUCKET", "false")
    versions = _check(spark, tables.lake, tables.history)
    changes = {(c.trip_id, c.ref): c for batch in batches for c in batch}
    mine = [v for v in versions
            if any(base < v["trip_id"] <= base + KEYS_PER_STREAM for base in bases)]
    assert {v["trip_id"] for v in mine} == {trip_id for trip_id, _ in changes}  # each a full
    for version in mine:
        change = changes[(version["trip_id"], version["_ref_key"])]  # no version of its own
        assert version["_is_deleted"] == (change.kind == "delete")
        assert version["_event_ts"] == dt.datetime.fromtimestamp(event_ms(change.ref) / 1000)
        if change.kind == "delete":
            continue  # the row as it was
        row = {"trip_id": version["trip_id"], "rider_id": version["rider_id"],
               "driver_id": version["driver_id"], "city": version["city_name"],
               "status": version["trip_status"], "fare": version["fare_amount"],
               "distance_km": version["distance_km"]}
        row = {k: float(v) if k in ("fare", "distance_km") and v is not None else v
               for k, v in row.items()}
        expected = as_lake({"trip_id": change.trip_id, **change.values})
        named = change.changed or tuple(expected)
        assert {c: row[c] for c in named} == {c: expected[c] for c in named}, (version, change)


def _full(trip_id: int, ref: int, value: int, force: bool = False) -> Change:
    return Change(trip_id, ref, "full", {
        "rider_id": value, "driver_id": value, "city": "berlin", "status": "accepted",
        "fare": 10.0 + value, "distance_km": 1.0 + value}, None, force)


def _delete(trip_id: int, ref: int, force: bool = False) -> Change:
    return Change(trip_id, ref, "delete", _full(trip_id, ref, 0).values, None, force)


@pytest.mark.e2e
@pytest.mark.parametrize(("table_format", "lake"), [
    ("hudi", "bucket"), ("hudi", "bucket, step tables"), ("hudi", "record index"),
    ("hudi", "tombstones kept"), ("iceberg", "tombstones kept")])
def test_a_forced_delete_outranks_a_newer_row_in_the_lakes_log_files(
        format_spark: Any, broker: str, make_settings: Any, project: Any, job_name: str,
        table_format: str, lake: str) -> None:
    """A forced delete older than the row (a re-sent delete) removes it, also when that row
    is in an earlier log file of the same Hudi file slice, and compaction keeps it removed.
    Hudi 1.0.2 orders a delete by its ordering field there whatever the merge mode, so the
    lake writes deletes with the largest _ref_key (macros/sluice_lake_row.sql); a row
    re-created after such a delete is not outranked by it. One job per way a Hudi lake is
    written: the batch path's upsert, the materialization's upsert, its MERGE, and its MERGE
    into a lake that keeps deleted rows (keep_tombstones: a delete is an update there, which
    keeps the row's values; on Iceberg too)."""
    tombstones = lake == "tombstones kept"
    root = project(job_name, keep_tombstones=tombstones)
    if lake == "record index":
        configure_lake(root / "models" / "lake" / f"{job_name}.sql", ", lake_index='record'")
    if lake == "bucket":  # with a history: the forced changes remove versions (#52)
        configure_lake(root / "models" / "lake" / f"{job_name}.sql",
                       ", history=true, hard_deletes='new_record'")
    settings_ = make_settings({job_name: trips_job(
        job_name, keep_step_tables=lake == "bucket, step tables")}, table_format=table_format)
    broker_mod.ensure_topic(broker, job_name, 2)
    job_tables = (settings_, settings_.job(job_name), Dbt(settings_))
    base, ref = 100, 1_000
    batches = [
        # creates the lake: base files
        [_full(base + 1, ref + 1, 1), _full(base + 2, ref + 2, 2), _full(base + 3, ref + 3, 3)],
        # log files: newer rows and a delete (no new key: a record-index lake may rewrite a
        # small file group whole to take new keys in, a base file instead of a log file)
        [_full(base + 1, ref + 30, 4), _delete(base + 2, ref + 31), _full(base + 3, ref + 32, 5)],
        # later log files: forced deletes older than the rows before them, and a forced row
        # older than the delete before it (a delete ranks above every ref key in the lake)
        [_delete(base + 1, ref + 20, force=True), _full(base + 2, ref + 21, 6, force=True),
         _delete(base + 3, ref + 5, force=True)],
    ]
    spark = format_spark
    tables = assert_lake_equals_oracle(spark, broker, job_tables, batches, [base], None,
                                       tombstones)
    assert set(lake_rows(spark, tables.lake, tombstones)) == {base + 2}
    # compaction merges those log files into base files the same way
    maintain_job(spark, job_tables[2], job_tables[1])
    assert_lake_holds_oracle(spark, tables, batches, [base], tombstones)
    if lake == "bucket":
        assert_history_holds_oracle(spark, tables, batches, [base])
    if tombstones:  # the deleted rows kept with their values, and the deletes' ref keys
        assert {r[0]: (r[1], r[2]) for r in spark.sql(
            f"select trip_id, _ref_key, rider_id from {tables.lake} where _is_deleted"
        ).collect()} == {base + 1: (ref + 20, 4), base + 3: (ref + 5, 5)}
    else:  # the query docs/index.md gives for rows a lost delete left finds none
        assert spark.sql(f"""
            with newest as (
              select _row_key, max_by(_is_deleted, _batch_id) as _is_deleted
              from {tables.index} group by _row_key)
            select lake._row_key, lake._ref_key, lake._batch_id
            from {tables.lake} as lake left join newest on lake._row_key = newest._row_key
            where newest._is_deleted is null or newest._is_deleted""").collect() == []
