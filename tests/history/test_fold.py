"""The history's rules (steps/history/fold.py) without Spark: the merge oracle's random
streams (duplicates, forced re-deliveries, out of order across batches, partial updates,
deletes), applied batch by batch to a history held in a dict, beside the lake's own fold
(steps/merge/changeset.py, which test_changeset checks against the oracle). After every batch, for
every key: the versions tile time without gap or overlap, each version's values are the row
after its change, and the current versions equal the lake row for row."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from python_ingest.steps.history.fold import Options, history_batch
from python_ingest.steps.merge.changeset import Declined, KeyState, change_set, fill_current
from tests.steps.test_changeset import COLUMNS, as_changes
from tests.steps.test_merge_oracle import Change, examples

pytestmark = pytest.mark.history
T0 = dt.datetime(2026, 3, 1, 8)
PAYLOAD = COLUMNS
TRACKED = frozenset({"city", "status"})  # the oracle's other columns change in place
UNTRACKED = frozenset({"rider_id", "fare", "distance_km"})


def at(minute: int) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minute)


class History:
    """A history table in a dict: (row key, ref key) -> row, as the writer commits it."""

    def __init__(self, options: Options, columns: Sequence[str] = PAYLOAD) -> None:
        self.options, self.columns = options, columns
        self.rows: dict[tuple[str, int], dict[str, Any]] = {}

    def apply(self, changes: list[dict[str, Any]], batch_id: int) -> None:
        keys = {c["_row_key"] for c in changes}
        stored: dict[str, list[dict[str, Any]]] = {}
        for (key, _), row in self.rows.items():
            if key in keys:
                stored.setdefault(key, []).append(row)
        outcome = history_batch(changes, stored, self.columns, batch_id, self.options)
        for record in outcome.remove:
            del self.rows[record]
        for row in outcome.write:
            self.rows[(row["_row_key"], row["_ref_key"])] = row

    def versions(self, key: str) -> list[dict[str, Any]]:
        return sorted((r for (k, _), r in self.rows.items() if k == key),
                      key=lambda r: r["_ref_key"])

    def current(self) -> dict[str, dict[str, Any]]:
        return {r["_row_key"]: {c: r[c] for c in self.columns} for r in self.rows.values()
                if r["_is_current"] and not r["_is_deleted"]}


def assert_tiles(history: History) -> None:
    """Per key: from <= to, each version ends where the next starts (or, closed by a delete
    of an invalidate history, before it), only the newest is current."""
    for key in {k for k, _ in history.rows}:
        versions = history.versions(key)
        if history.options.hard_deletes == "invalidate":  # markers: a delete with no version
            markers = [v for v in versions if v["_is_deleted"]]
            assert all(m["_valid_from"] == m["_valid_to"] and not m["_is_current"]
                       for m in markers)
            versions = [v for v in versions if not v["_is_deleted"]]
        for i, version in enumerate(versions):
            last = i == len(versions) - 1
            assert version["_is_current"] == (last and version["_closed_ref_key"] is None)
            if version["_valid_to"] is not None:
                assert version["_valid_from"] <= version["_valid_to"], version
            if last:
                continue
            following = versions[i + 1]
            assert version["_valid_to"] is not None and version["_closed_ref_key"] is not None
            if version["_closed_ref_key"] == following["_ref_key"]:
                assert version["_valid_to"] == following["_valid_from"]  # no gap, no overlap
            else:  # a delete ended it: the key did not exist until the next version
                assert history.options.hard_deletes == "invalidate"
                assert version["_ref_key"] < version["_closed_ref_key"] < following["_ref_key"]
                assert version["_valid_to"] <= following["_valid_from"]


def with_clock(changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Source commit times that sometimes go backwards against ref-key order."""
    return [{**c, "_event_ts": at((c["_ref_key"] * 37) % 101)} for c in changes]


@pytest.mark.reliability
@settings(max_examples=40, deadline=None, database=None, print_blob=True,
          phases=(Phase.explicit, Phase.generate),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(example=examples())
def test_the_history_tiles_time_and_its_current_versions_are_the_lake(
        example: tuple[list[list[Change]], list[int]]) -> None:
    batches, _ = example
    lake: dict[str, dict[str, Any]] = {}
    states: dict[str, KeyState] = {}
    histories = [History(Options()), History(Options(hard_deletes="new_record")),
                 History(Options(track=TRACKED)),
                 History(Options(hard_deletes="new_record", untracked=UNTRACKED))]
    for number, batch in enumerate(batches, 1):
        changes = with_clock(as_changes(batch))
        try:
            folded = change_set(changes, states, COLUMNS, number)
        except Declined:
            return  # a rejected partial update: the oracle's own test covers it
        fill_current(folded, lake)
        for result in folded:
            row = result.row
            states[row["_row_key"]] = KeyState(row["_ref_key"], not row["_is_deleted"])
            if row["_merge_action"] in ("insert", "update"):
                lake[row["_row_key"]] = {c: row[c] for c in COLUMNS}
            elif row["_merge_action"] == "delete":
                del lake[row["_row_key"]]
        by_ref = {(c["_row_key"], c["_ref_key"]): c for c in changes}
        for history in histories:
            history.apply(changes, number)
            assert_tiles(history)
            assert history.current() == lake
            for (key, ref), version in history.rows.items():
                assert_values(history, version, by_ref.get((key, ref)),
                              by_ref.get((key, version.get("_last_ref_key"))))
            before = {k: dict(v) for k, v in history.rows.items()}
            history.apply(changes, number)  # a rerun of the batch: the same rows
            assert_tiles(history)
            assert history.current() == lake
            if not any(c["_force_update"] for c in changes):  # a forced change applies again
                assert history.rows == before


def assert_values(history: History, version: dict[str, Any], opened: dict[str, Any] | None,
                  last: dict[str, Any] | None) -> None:
    """A version's values are the row after the change that opened it (with
    ``track_history_on``: in the tracked columns; the others are the newest absorbed
    change's, ``_last_ref_key``), its ``_event_ts`` that change's."""
    options = history.options
    tracked = [c for c in COLUMNS if (options.track is None or c in options.track)
               and c not in options.untracked]
    if opened is not None and not opened["_is_deleted"]:
        named = [c for c in opened["_changed_columns"] or COLUMNS
                 if c in tracked or version.get("_last_ref_key") == version["_ref_key"]]
        assert {c: version[c] for c in named} == {c: opened[c] for c in named}
        assert version["_event_ts"] == opened["_event_ts"]
    if last is not None and not last["_is_deleted"] and not version["_is_deleted"]:
        named = last["_changed_columns"] or COLUMNS
        assert {c: version[c] for c in named} == {c: last[c] for c in named}
        assert version["_last_event_ts"] == last["_event_ts"]


def change(ref: int, minute: int, key: str = "k", deleted: bool = False,
           forced: bool = False, changed: list[str] | None = None, **values: Any
           ) -> dict[str, Any]:
    return {"_row_key": key, "_ref_key": ref, "_is_deleted": deleted, "_force_update": forced,
            "_changed_columns": changed, "_kafka_partition": 0, "_kafka_offset": ref,
            "_event_ts": at(minute), "_source": "t", "_data_center": None,
            "a": values.get("a"), "b": values.get("b")}


def small(options: Options | None = None) -> History:
    return History(options or Options(), ("a", "b"))


def spans(history: History, key: str = "k") -> list[tuple[int, int, Any, Any]]:
    return [(r["_ref_key"], r["_batch_id"], r["_valid_from"], r["_valid_to"])
            for r in history.versions(key)]


def test_two_updates_of_a_key_in_one_batch_are_two_versions_and_a_repeat_changes_nothing(
        ) -> None:
    history = small()
    history.apply([change(1, 0, a=1), change(2, 5, a=2), change(3, 9, a=3)], 1)
    assert spans(history) == [(1, 1, at(0), at(5)), (2, 1, at(5), at(9)), (3, 1, at(9), None)]
    before = {k: dict(v) for k, v in history.rows.items()}
    history.apply([change(2, 5, a=99)], 2)  # the same change again (same ref key)
    assert history.rows == before


def test_a_late_change_is_spliced_between_its_neighbours_without_touching_the_current() -> None:
    history = small()
    history.apply([change(10, 10, a=1, b=1), change(30, 30, changed=["b"], b=3)], 1)
    history.apply([change(20, 20, changed=["a"], a=2)], 2)  # late, older than the newest
    assert spans(history) == [(10, 1, at(10), at(20)), (20, 2, at(20), at(30)),
                              (30, 1, at(30), None)]
    versions = history.versions("k")
    assert (versions[1]["a"], versions[1]["b"]) == (2, 1)  # carried from the version before
    assert history.current() == {"k": {"a": 1, "b": 3}}  # the lake never applied it
    assert versions[0]["_closed_batch_id"] == 2 and versions[1]["_closed_ref_key"] == 30


def test_a_backward_clock_gives_an_empty_interval_not_an_overlap() -> None:
    history = small()
    history.apply([change(1, 10, a=1), change(2, 4, a=2), change(3, 12, a=3)], 1)
    assert spans(history) == [(1, 1, at(10), at(10)), (2, 1, at(10), at(12)),
                              (3, 1, at(12), None)]


def test_a_forced_change_replaces_the_versions_from_it_on_as_the_merge_does() -> None:
    history = small()
    history.apply([change(1, 1, a=1, b=1), change(2, 2, a=2, b=2), change(3, 3, a=3, b=3)], 1)
    history.apply([change(2, 2, forced=True, changed=["a"], a=20)], 2)
    # the merge applies it to the current row (a=3, b=3): a=20, b=3, ref key 2
    assert [(r["_ref_key"], r["a"], r["b"], r["_is_current"]) for r in history.versions("k")
            ] == [(1, 1, 1, False), (2, 20, 3, True)]


def test_deletes_invalidate_or_open_a_deleted_version_and_a_reinsert_opens_one() -> None:
    batch = [change(1, 1, a=1), change(2, 2, deleted=True), change(3, 3, a=3)]
    invalidate, new_record = small(), small(Options(hard_deletes="new_record"))
    for history in (invalidate, new_record):
        history.apply(batch[:2], 1)
    assert spans(invalidate) == [(1, 1, at(1), at(2))]
    assert invalidate.versions("k")[0]["_closed_ref_key"] == 2
    assert invalidate.current() == {}
    assert [(r["_ref_key"], r["_is_deleted"], r["_is_current"], r["a"])
            for r in new_record.versions("k")] == [(1, False, False, 1), (2, True, True, 1)]
    for history in (invalidate, new_record):
        history.apply(batch[2:], 2)
        history.apply([change(0, 0, a=0)], 3)  # older than everything: the first version
        assert history.current() == {"k": {"a": 3, "b": None}}
    assert spans(invalidate) == [(0, 3, at(0), at(1)), (1, 1, at(1), at(2)),
                                 (3, 2, at(3), None)]
    late = small()  # a late change between a version and the delete that ended it
    late.apply([change(10, 1, a=1), change(20, 2, deleted=True)], 1)
    late.apply([change(10, 1, a=1)], 2)  # a repeat
    late.apply([change(0, 0, a=0), change(15, 1, a=15)], 3)
    assert [(r["_ref_key"], r["_valid_to"], r["_closed_ref_key"]) for r in late.versions("k")
            ] == [(0, at(1), 10), (10, at(1), 15), (15, at(2), 20)]
    assert late.current() == {}


def test_truncate_closes_every_current_version() -> None:
    history = small()
    history.apply([change(1, 1, key="x", a=1), change(2, 1, key="y", a=2)], 1)
    # TRUNCATE: a delete of every live row, each with the TRUNCATE's ref key
    history.apply([change(9, 5, key="x", deleted=True), change(9, 5, key="y", deleted=True)], 2)
    assert history.current() == {}
    assert all(r["_valid_to"] == at(5) and not r["_is_current"] for r in history.rows.values())


def test_untracked_columns_update_the_current_version_in_place_and_a_sentinel_ends_it(
        ) -> None:
    forever = dt.datetime(9999, 12, 31)
    history = small(Options(track=frozenset({"a"}), valid_to_current=forever))
    history.apply([change(1, 1, a=1, b=1), change(2, 2, a=1, b=2), change(3, 3, a=3, b=2)], 1)
    assert [(r["_ref_key"], r["a"], r["b"], r["_valid_to"]) for r in history.versions("k")
            ] == [(1, 1, 2, at(3)), (3, 3, 2, forever)]


@pytest.mark.reliability
def test_a_late_change_inside_what_the_current_version_absorbed_keeps_it_the_lake_row(
        ) -> None:
    """track_history_on: 30 alters only b, so the version of 10 absorbs it (the lake row is
    30's); 20, late, alters a: it is spliced between 10 and 30, and a version opened by 30
    carries the lake's row after it (before the fix 20 became the current version)."""
    history = small(Options(track=frozenset({"a"})))
    history.apply([change(10, 10, a=1, b=1), change(30, 30, a=1, b=3)], 1)
    assert [(r["_ref_key"], r["_last_ref_key"], r["_last_event_ts"], r["b"])
            for r in history.versions("k")] == [(10, 30, at(30), 3)]
    history.apply([change(20, 20, a=2, b=2)], 2)
    assert [(r["_ref_key"], r["_batch_id"], r["_valid_from"], r["_valid_to"], r["a"], r["b"],
             r["_is_current"]) for r in history.versions("k")] == [
        (10, 1, at(10), at(20), 1, 3, False), (20, 2, at(20), at(30), 2, 2, False),
        (30, 2, at(30), None, 1, 3, True)]
    assert history.current() == {"k": {"a": 1, "b": 3}}  # the lake kept 30's row
    before = {k: dict(v) for k, v in history.rows.items()}
    history.apply([change(20, 20, a=2, b=2), change(30, 30, a=1, b=3),
                   change(15, 15, a=1, b=9)], 3)  # repeats; 15 in 10's range, a unchanged
    assert history.rows == before
    deleted = small(Options(track=frozenset({"a"})))  # a late delete inside the range
    deleted.apply([change(10, 10, a=1, b=1), change(30, 30, a=1, b=3)], 1)
    deleted.apply([change(20, 20, deleted=True)], 2)
    assert [(r["_ref_key"], r["_valid_to"], r["_closed_ref_key"], r["b"])
            for r in deleted.versions("k")] == [(10, at(20), 20, 3), (30, None, None, 3)]
    assert deleted.current() == {"k": {"a": 1, "b": 3}}


@pytest.mark.reliability
def test_a_repeat_of_an_absorbed_change_changes_nothing() -> None:
    """track_history_except: 20 and 30 alter only b and are absorbed; a copy of 20 (or of 30)
    in a later batch is a repeat: the version keeps 30's values, the lake's (before the fix
    20's copy wrote its b into the current version)."""
    history = small(Options(untracked=frozenset({"b"})))
    history.apply([change(10, 10, a=1, b=1), change(20, 20, a=1, b=2),
                   change(30, 30, a=1, b=3)], 1)
    before = {k: dict(v) for k, v in history.rows.items()}
    assert [(r["_ref_key"], r["_last_ref_key"], r["b"]) for r in before.values()] == [
        (10, 30, 3)]
    for repeat in (change(20, 20, a=1, b=2), change(30, 30, a=1, b=3),
                   change(20, 20, changed=["b"], b=2)):
        history.apply([repeat], 2)
        assert history.rows == before
    assert history.current() == {"k": {"a": 1, "b": 3}}
    history.apply([change(40, 40, a=1, b=4)], 3)  # newer: absorbed
    assert [(r["_ref_key"], r["_last_ref_key"], r["b"], r["_valid_to"])
            for r in history.versions("k")] == [(10, 40, 4, None)]


def test_versions_written_before_the_last_ref_key_column_read_as_their_own() -> None:
    """A history written before ``_last_ref_key`` existed (the writer adds the column: NULL
    in its rows): each version holds its own change; a change touching the key writes the
    column."""
    history = small(Options(track=frozenset({"a"})))
    history.apply([change(10, 10, a=1, b=1)], 1)
    for row in history.rows.values():
        row["_last_ref_key"] = row["_last_event_ts"] = None
    history.apply([change(5, 5, a=0, b=0), change(20, 20, a=1, b=2)], 2)
    assert [(r["_ref_key"], r["_last_ref_key"], r["b"], r["_is_current"])
            for r in history.versions("k")] == [(5, 5, 0, False), (10, 20, 2, True)]
