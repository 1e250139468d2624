"""The history's rules in plain Python: a batch's valid changes applied to the versions of the
keys they touch (python_ingest/steps/history/rules.py states the rules and the schema).

Per key, the versions the table holds are read back into a timeline of entries in ref-key
order (versions, and the deletes an ``invalidate`` history only records as a version's
``_closed_ref_key``); the batch's changes are applied to it one by one in ref-key order, then
every entry's bounds are computed again. What comes out is what the table must be for those
keys: the rows to write (new versions, and old ones whose bounds or values moved) and the
record keys to remove (versions a forced change replaced). The writer (steps/history/writer.py)
commits both at once; tests/history/ checks the fold against the merge oracle.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from python_ingest.steps.merge.changeset import group_changes

OPENED = ("_row_key", "_ref_key", "_is_deleted", "_event_ts", "_source", "_data_center",
          "_batch_id")  # of the change that opened the version
BOUNDS = ("_valid_from", "_valid_to", "_is_current", "_closed_ref_key", "_closed_batch_id")
FOLDED = ("_last_ref_key", "_last_event_ts")  # the newest change whose values it holds


@dataclass(frozen=True)
class Options:
    """The lake model's history config."""

    hard_deletes: str = "invalidate"  # or new_record
    track: frozenset[str] | None = None  # tracked payload columns; None: every column
    valid_to_current: Any = None  # the current version's _valid_to
    untracked: frozenset[str] = frozenset()  # track_history_except: all columns but these


@dataclass
class Entry:
    """A version or a delete of one key, in the key's timeline."""

    ref_key: int
    values: dict[str, Any]  # the row after the change (payload, _source, _data_center)
    event_ts: Any
    batch_id: int
    deleted: bool
    stored: dict[str, Any] | None = None  # the table's row, when it holds one
    # the newest change whose values it holds (_last_ref_key): its own, or the newest change
    # absorbed into it (track_history_on); None: its own
    last_ref: int | None = None
    last_ts: Any = None

    def __post_init__(self) -> None:
        if self.last_ref is None:
            self.last_ref, self.last_ts = self.ref_key, self.event_ts

    @property
    def last(self) -> int:
        assert self.last_ref is not None
        return self.last_ref


@dataclass
class Outcome:
    """What the table must change for the batch's keys."""

    write: list[dict[str, Any]] = field(default_factory=list)
    remove: list[tuple[str, int]] = field(default_factory=list)


def _is_partial(change: Mapping[str, Any]) -> bool:
    return change.get("_changed_columns") is not None and not change["_is_deleted"]


def timeline(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> list[Entry]:
    """One key's stored versions as entries, with the invalidating deletes between them."""
    entries: list[Entry] = []
    ordered = sorted(rows, key=lambda r: r["_ref_key"])
    for i, row in enumerate(ordered):
        values = {c: row.get(c) for c in (*columns, "_source", "_data_center")}
        last = row.get("_last_ref_key")  # NULL: written before the column, its own
        entries.append(Entry(row["_ref_key"], values, row.get("_event_ts"), row["_batch_id"],
                             bool(row.get("_is_deleted")), dict(row), last,
                             row.get("_last_event_ts") if last is not None else None))
        closer = row.get("_closed_ref_key")
        following = ordered[i + 1]["_ref_key"] if i + 1 < len(ordered) else None
        if closer is not None and closer != following:  # closed by a delete of its own
            entries.append(Entry(closer, dict(values), row.get("_valid_to"),
                                 row.get("_closed_batch_id") or row["_batch_id"], True))
    return entries


def _live_before(entries: list[Entry], position: int) -> Entry | None:
    """The entry before ``position`` when it is a live version (what a partial builds on)."""
    if position == 0 or entries[position - 1].deleted:
        return None
    return entries[position - 1]


def _tracked_same(before: Mapping[str, Any], after: Mapping[str, Any], options: Options,
                  columns: Sequence[str]) -> bool:
    if options.track is None and not options.untracked:
        return False  # every column tracked: every change a version
    tracked = [c for c in columns if (options.track is None or c in options.track)
               and c not in options.untracked]
    return all(before.get(c) == after.get(c) for c in tracked)


def _in_range(entries: list[Entry], index: int) -> bool:
    """Whether the newest change entry ``index`` holds lies in its range, before the next
    entry (a late change or a forced one since may have opened a version at or before it)."""
    entry = entries[index]
    return entry.last > entry.ref_key and (index + 1 == len(entries)
                                           or entry.last < entries[index + 1].ref_key)


def _absorbed(entries: list[Entry]) -> set[int]:
    """The ref keys of the changes the versions absorbed and still hold (their ``last``)."""
    return {e.last for i, e in enumerate(entries) if _in_range(entries, i)}


def _absorbed_after(entries: list[Entry], position: int, ref: int) -> Entry | None:
    """The version a change at ``position`` (ref key ``ref``) lands inside of: the entry
    before it when a change it absorbed (its ``last``) is newer than ``ref`` and lies in its
    range (None: the change lands after everything that entry holds)."""
    if position == 0 or entries[position - 1].deleted:
        return None
    before = entries[position - 1]
    return before if before.last > ref and _in_range(entries, position - 1) else None


def apply(entries: list[Entry], changes: Sequence[Mapping[str, Any]], columns: Sequence[str],
          batch_id: int, options: Options) -> list[Entry]:
    """One key's changes (ref-key order, one per ref key) applied to its timeline."""
    for change in changes:
        ref = change["_ref_key"]
        forced = bool(change["_force_update"])
        refs = [e.ref_key for e in entries]
        if not forced and (ref in refs or ref in _absorbed(entries)):
            continue  # a repeated change (a version's, or one absorbed into a version)
        replacing = forced and bool(entries)
        position = sum(1 for r in refs if r < ref)
        if replacing:  # as the merge: on the current row, replacing the versions from it on
            base = None if entries[-1].deleted else entries[-1]
        else:
            base = _live_before(entries, position)
        values: dict[str, Any] = {"_source": change.get("_source"),
                                  "_data_center": change.get("_data_center")}
        if change["_is_deleted"]:
            kept = base.values if base is not None else change
            values.update({c: kept.get(c) for c in columns})
        elif _is_partial(change):
            if base is None:
                continue  # the merge rejects it: not a version
            changed = set(change["_changed_columns"])
            values.update({c: change.get(c) if c in changed else base.values.get(c)
                           for c in columns})
        else:
            values.update({c: change.get(c) for c in columns})
        if replacing:  # a version that absorbed changes from its ref key on keeps their
            # values; its last (>= the forced version's ref key) no longer lies in its range
            entries = entries[:position]
        # the version right before it (a forced change's: the current one, when kept)
        adjacent = position > 0 and base is entries[position - 1]
        if (not change["_is_deleted"] and base is not None and adjacent
                and _tracked_same(base.values, values, options, columns)):
            if forced or ref > base.last:  # untracked columns only: the version in place
                base.values, base.last_ref, base.last_ts = values, ref, change.get("_event_ts")
            continue  # else it holds a newer change's values already (the lake's too)
        inside = None if forced else _absorbed_after(entries, position, ref)
        entries.insert(position, Entry(ref, values, change.get("_event_ts"), batch_id,
                                       bool(change["_is_deleted"])))
        if inside is not None:  # late inside what a version absorbed: after it, the values
            # of the newest change absorbed (the lake's, when that version was current)
            entries.insert(position + 1, Entry(inside.last, dict(inside.values),
                                               inside.last_ts, batch_id, False))
    return entries


def rows(row_key: str, entries: list[Entry], columns: Sequence[str], batch_id: int,
         options: Options) -> list[dict[str, Any]]:
    """The version rows of a key's timeline, bounds computed again (deletes of an invalidate
    history are not rows: they end the version before them)."""
    starts: list[Any] = []
    for entry in entries:  # a backward clock: the start of the entry before
        start = entry.event_ts
        if starts and starts[-1] is not None and (start is None or start < starts[-1]):
            start = starts[-1]
        starts.append(start)
    out = []
    for i, entry in enumerate(entries):
        following = entries[i + 1] if i + 1 < len(entries) else None
        marker = entry.deleted and options.hard_deletes != "new_record"
        if marker and i > 0 and not entries[i - 1].deleted:
            continue  # it ends the version before it (_closed_ref_key)
        if marker:  # a delete with no version to end: a marker, so older changes stay stale
            following = None
        row = {**{c: entry.values.get(c) for c in columns}, "_row_key": row_key,
               "_ref_key": entry.ref_key, "_is_deleted": entry.deleted,
               "_event_ts": entry.event_ts, "_source": entry.values.get("_source"),
               "_data_center": entry.values.get("_data_center"), "_batch_id": entry.batch_id,
               "_valid_from": starts[i],
               "_valid_to": starts[i] if marker else starts[i + 1] if following
               else options.valid_to_current,
               "_is_current": following is None and not marker,
               "_closed_ref_key": following.ref_key if following else None,
               "_last_ref_key": entry.last, "_last_event_ts": entry.last_ts}
        stored = entry.stored
        moved = stored is None or stored.get("_closed_ref_key") != row["_closed_ref_key"] \
            or stored.get("_valid_to") != row["_valid_to"]
        row["_closed_batch_id"] = None if following is None else (
            batch_id if moved else stored.get("_closed_batch_id") if stored else batch_id)
        out.append(row)
    return out


def _same(stored: Mapping[str, Any], row: Mapping[str, Any]) -> bool:
    return all(stored.get(c) == v for c, v in row.items())


def history_batch(changes: Iterable[Mapping[str, Any]],
                  stored: Mapping[str, Sequence[Mapping[str, Any]]], columns: Sequence[str],
                  batch_id: int, options: Options) -> Outcome:
    """A batch's valid changes against the stored versions of their keys (``stored``: by row
    key): the rows to write and the record keys to remove."""
    outcome = Outcome()
    for row_key, keyed in group_changes(changes).items():
        before = list(stored.get(row_key, ()))
        entries = apply(timeline(before, columns), keyed, columns, batch_id, options)
        after = rows(row_key, entries, columns, batch_id, options)
        old = {r["_ref_key"]: r for r in before}
        outcome.write += [r for r in after
                          if r["_ref_key"] not in old or not _same(old[r["_ref_key"]], r)]
        kept = {r["_ref_key"] for r in after}
        outcome.remove += [(row_key, ref) for ref in old if ref not in kept]
    return outcome


def as_time(value: Any) -> dt.datetime | None:
    """A ``valid_to_current`` config value as a timestamp (None: NULL)."""
    if value is None or isinstance(value, dt.datetime):
        return value
    return dt.datetime.fromisoformat(str(value))
