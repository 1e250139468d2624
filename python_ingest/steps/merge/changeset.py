"""A small batch's change set on the driver: the lake model's rules in plain Python.

The lake model's change set (macros/sluice_merge_changes.sql) is the reference: one row per
row key the batch changes, saying what it does (``_merge_action``) and the row's values after
it. For a batch of a few hundred rows, running that SQL costs Spark about two seconds of
analysis, planning and five stages, for what a dictionary does in milliseconds. The runner's
batch path (steps/batch.py) therefore folds small batches here, with each key's state from the
global index held in memory (steps/merge/index_cache.py), and hands the result to the same upsert.

The rules are the macro's, line for line (its comments say why each holds):

* a change is (row key, ref key); copies of one count once, a forced copy first, then the
  lowest Kafka partition and offset (nulls first, as Spark sorts them ascending);
* a change is a candidate when the key has no state, its ref key is newer, or it is forced;
  the changes from the oldest candidate that is not a partial update of a row that does not
  exist, on, apply (the suffix);
* a partial update is rejected when the row does not exist as it reaches it;
* the last full row or delete of the suffix resets the row, partial updates after it set
  their changed columns, the other columns keep the current row's values.

What this module does not fold it declines (``Declined``), and the batch takes the SQL path:
a rejected partial update (its error row quotes the change as Spark writes JSON), NULL in a
column the rules branch on. ``tests/steps/test_changeset.py`` runs random batches through
both and compares them row for row.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# the change set's own columns besides the lake model's payload columns (the macro's final)
FRAMEWORK = ("_row_key", "_ref_key", "_is_deleted", "_event_ts", "_source", "_data_center",
             "_batch_id", "_merge_action", "_rejected")
CARRIED = ("_event_ts", "_source", "_data_center")  # from the newest applied change


class Declined(Exception):  # noqa: N818 (a decision, not a failure)
    """The batch is not folded here; the reason says why (it takes the SQL path)."""


@dataclass(frozen=True)
class KeyState:
    """A row key's state before the batch, from the global index."""

    ref_key: int
    is_live: bool


@dataclass
class Folded:
    """One key's outcome: the change set row, less the columns kept from the current row
    (``needs_current``: the lake row's values fill them)."""

    row: dict[str, Any]
    needs_current: list[str]


def _copy_order(change: Mapping[str, Any]) -> tuple[Any, ...]:
    partition, offset = change.get("_kafka_partition"), change.get("_kafka_offset")
    return (not change["_force_update"], partition is not None, partition or 0,
            offset is not None, offset or 0)


def group_changes(changes: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """The batch's changes by row key, one per (row key, ref key), in ref-key order."""
    chosen: dict[tuple[str, int], Mapping[str, Any]] = {}
    for change in changes:
        for column in ("_row_key", "_ref_key", "_is_deleted", "_force_update"):
            if change.get(column) is None:
                raise Declined(f"a change with NULL {column}")
        key = (change["_row_key"], change["_ref_key"])
        found = chosen.get(key)
        if found is None or _copy_order(change) < _copy_order(found):
            chosen[key] = change
    by_key: dict[str, list[Mapping[str, Any]]] = {}
    for (row_key, _), change in sorted(chosen.items(), key=lambda kv: kv[0]):
        by_key.setdefault(row_key, []).append(change)
    return by_key


def _is_partial(change: Mapping[str, Any]) -> bool:
    return change.get("_changed_columns") is not None and not change["_is_deleted"]


def fold(changes: Sequence[Mapping[str, Any]], state: KeyState | None,
         columns: Sequence[str], batch_id: int) -> Folded | None:
    """One key's changes (ref-key order, deduplicated) applied to its state: the change set
    row, or None when nothing applies (the macro writes no row then)."""
    current_ref = state.ref_key if state is not None else None
    current_live = state.is_live if state is not None else False
    candidate = [current_ref is None or c["_ref_key"] > current_ref or bool(c["_force_update"])
                 for c in changes]
    starts = [c["_ref_key"] for c, ok in zip(changes, candidate, strict=True)
              if ok and (not _is_partial(c) or current_live)]
    start = min(starts) if starts else None
    applied: list[Mapping[str, Any]] = []
    live_before: bool | None = None  # after the last full row or delete of the suffix
    for change, is_candidate in zip(changes, candidate, strict=True):
        in_suffix = start is not None and change["_ref_key"] >= start
        if _is_partial(change):
            exists = live_before if live_before is not None else current_live
            if (in_suffix and not exists) or (not in_suffix and is_candidate
                                               and not current_live):
                raise Declined("a partial update of a row that does not exist")
        elif in_suffix:
            live_before = not change["_is_deleted"]
        if in_suffix:
            applied.append(change)
    if not applied:
        return None
    full = [c for c in applied if not _is_partial(c)]
    is_live = not full[-1]["_is_deleted"] if full else current_live
    newest = applied[-1]
    row: dict[str, Any] = {"_row_key": newest["_row_key"], "_ref_key": newest["_ref_key"],
                           "_is_deleted": not is_live}
    needs_current = []
    for column in columns:
        # the newest change that sets it: a partial update naming it, or the last full row
        # or delete (the reset), past which no older change is looked at
        source = next((c for c in reversed(applied)
                       if not _is_partial(c) or column in c["_changed_columns"]), None)
        if source is None:
            needs_current.append(column)
        else:
            row[column] = source[column]
    for column in CARRIED:
        row[column] = newest.get(column)
    row["_batch_id"] = batch_id
    row["_merge_action"] = ("update" if is_live and current_live else "insert" if is_live
                            else "delete" if current_live else "tombstone")
    row["_rejected"] = []
    return Folded(row, needs_current)


def change_set(changes: Iterable[Mapping[str, Any]], states: Mapping[str, KeyState],
               columns: Sequence[str], batch_id: int) -> list[Folded]:
    """Every key's folded row (``states``: the index's entry of each key it has)."""
    folded = []
    for row_key, keyed in group_changes(changes).items():
        result = fold(keyed, states.get(row_key), columns, batch_id)
        if result is not None:
            folded.append(result)
    return folded


def fill_current(folded: Iterable[Folded], current: Mapping[str, Mapping[str, Any]]) -> None:
    """The columns a key keeps from its current lake row (``current``: by row key; a column
    or a row the lake lacks is NULL, as the macro's left join gives it)."""
    for result in folded:
        found = current.get(result.row["_row_key"], {})
        for column in result.needs_current:
            result.row[column] = found.get(column)
        result.needs_current = []
