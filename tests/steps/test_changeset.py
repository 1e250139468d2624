"""The change set folded on the driver (steps/merge/changeset.py) against the merge oracle: random
streams (duplicates, forced re-deliveries, out of order across batches, partial updates,
deletes) applied batch by batch to a lake held in a dict must give the oracle's rows after
every batch; a batch is declined only when the oracle rejects a partial update in it.

No Spark: this is the rules alone, at hundreds of examples a second. The pipeline runs them
on the real lake in test_merge_oracle.py and test_batch_path.py."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from python_ingest.steps.merge.changeset import (
    Declined,
    KeyState,
    change_set,
    fill_current,
    group_changes,
)
from tests.steps.helpers import as_lake
from tests.steps.test_merge_oracle import Change, examples, oracle

COLUMNS = ("trip_id", "rider_id", "driver_id", "city", "status", "fare", "distance_km")


def as_changes(batch: list[Change]) -> list[dict[str, Any]]:
    """The batch's events as valid rows reach the merge (every column, NULL where a partial
    update leaves it)."""
    return [{"_row_key": str(c.trip_id), "_ref_key": c.ref, "_is_deleted": c.kind == "delete",
             "_force_update": c.force, "_changed_columns": list(c.changed) if c.changed else None,
             "_kafka_partition": 0, "_kafka_offset": offset, "_event_ts": offset,
             "_source": "oracle", "_data_center": "dc1", "trip_id": c.trip_id,
             **{column: c.values.get(column) for column in COLUMNS[1:]}}
            for offset, c in enumerate(batch)]


@settings(max_examples=60, deadline=None, database=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(example=examples())
def test_the_driver_change_set_equals_the_oracle_after_every_batch(
        example: tuple[list[list[Change]], list[int]]) -> None:
    batches, _ = example
    lake: dict[str, dict[str, Any]] = {}
    states: dict[str, KeyState] = {}
    for number, batch in enumerate(batches, 1):
        try:
            folded = change_set(as_changes(batch), states, COLUMNS, number)
        except Declined:
            # only where the oracle rejects a partial update in this very batch
            assert oracle(batches[:number])[1] > oracle(batches[:number - 1])[1]
            return
        fill_current(folded, lake)
        for result in folded:
            row = result.row
            assert row["_batch_id"] == number and row["_rejected"] == []
            states[row["_row_key"]] = KeyState(row["_ref_key"], not row["_is_deleted"])
            if row["_merge_action"] in ("insert", "update"):
                lake[row["_row_key"]] = {c: row[c] for c in COLUMNS}
            elif row["_merge_action"] == "delete":
                del lake[row["_row_key"]]
            else:
                assert row["_merge_action"] == "tombstone" and row["_row_key"] not in lake
        expected, rejected = oracle(batches[:number])
        assert rejected == 0
        assert {int(k): as_lake(v) for k, v in lake.items()} == expected


def test_copies_of_a_change_count_once_the_forced_copy_first() -> None:
    plain = {"_row_key": "k", "_ref_key": 5, "_is_deleted": False, "_force_update": False,
             "_changed_columns": None, "_kafka_partition": 0, "_kafka_offset": 1, "v": "plain"}
    forced = {**plain, "_force_update": True, "_kafka_offset": 9, "v": "forced"}
    earlier = {**plain, "_kafka_offset": None, "v": "no offset"}  # NULL sorts first
    assert [c["v"] for c in group_changes([plain, forced])["k"]] == ["forced"]
    assert [c["v"] for c in group_changes([plain, earlier])["k"]] == ["no offset"]


def test_an_older_change_changes_nothing_and_a_forced_one_applies() -> None:
    state = {"k": KeyState(10, True)}
    old = {"_row_key": "k", "_ref_key": 5, "_is_deleted": False, "_force_update": False,
           "_changed_columns": None, "v": 1}
    assert change_set([old], state, ["v"], 1) == []
    [forced] = change_set([{**old, "_force_update": True}], state, ["v"], 1)
    assert forced.row["_merge_action"] == "update" and forced.row["_ref_key"] == 5


def test_a_partial_update_keeps_the_other_columns_of_the_current_row() -> None:
    change = {"_row_key": "k", "_ref_key": 11, "_is_deleted": False, "_force_update": False,
              "_changed_columns": ["a"], "a": 2, "b": None}
    [result] = change_set([change], {"k": KeyState(10, True)}, ["a", "b"], 3)
    assert result.needs_current == ["b"]
    fill_current([result], {"k": {"a": 1, "b": "kept"}})
    assert (result.row["a"], result.row["b"]) == (2, "kept")
    with pytest.raises(Declined):  # of a deleted row: rejected, which the SQL path writes
        change_set([change], {"k": KeyState(10, False)}, ["a", "b"], 3)


def test_a_null_the_rules_branch_on_is_declined() -> None:
    change = {"_row_key": "k", "_ref_key": 1, "_is_deleted": None, "_force_update": False,
              "_changed_columns": None}
    with pytest.raises(Declined):
        change_set([change], {}, [], 1)


def test_only_the_macros_own_change_set_is_folded_on_the_driver() -> None:
    from pyspark.sql import types as T

    from python_ingest.steps.merge.changeset import FRAMEWORK
    from python_ingest.steps.merge.driver import is_the_macros

    framework = [T.StructField(n, T.StringType()) for n in FRAMEWORK[1:]]
    schema = T.StructType([T.StructField("_row_key", T.StringType()),
                           T.StructField("fare", T.DoubleType()), *framework])
    macro = "-- the model's comment\n\nwith\n\nchanges as (\n select 1\n),\n\nselect * from final"
    assert is_the_macros(macro, schema, ["_row_key", "fare"])
    wrapped = f"select *, fare * 2 as doubled from ({macro})"
    assert not is_the_macros(wrapped, schema, ["_row_key", "fare"])
    own_cte = f"with mine as (select 1), {macro[macro.index('changes'):]}"
    assert not is_the_macros(own_cte, schema, ["_row_key", "fare"])
    derived = T.StructType([*schema.fields[:2], T.StructField("doubled", T.DoubleType()),
                            *framework])
    assert not is_the_macros(macro, derived, ["_row_key", "fare"])


def test_transported_rows_come_back_as_collect_gives_them() -> None:
    """The driver's valid rows travel with timestamps and dates as numbers; the history writer
    takes them back as ``collect`` gives a relation's rows (``Transport.as_collected``)."""
    import datetime as dt

    from pyspark.sql import types as T

    from python_ingest.steps.merge.driver import transport

    schema = T.StructType([T.StructField("k", T.StringType()),
                           T.StructField("at", T.TimestampType()),
                           T.StructField("on", T.DateType())])
    travel = transport(schema)
    assert travel is not None and set(travel.back) == {"at", "on"}
    at = dt.datetime(2026, 3, 1, 8, 30, 15, 123456)
    micros = T.TimestampType().toInternal(at)
    days = (dt.date(1970, 1, 10) - dt.date(1970, 1, 1)).days
    assert travel.as_collected([{"k": "a", "at": micros, "on": days},
                                {"k": "b", "at": None, "on": None}]) == [
        {"k": "a", "at": at, "on": dt.date(1970, 1, 10)}, {"k": "b", "at": None, "on": None}]
