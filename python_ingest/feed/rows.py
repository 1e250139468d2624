"""The change feed computed in Python from a history table's rows, read without a JVM
(``tables.native``): the same changes, in the same order, as ``changes.changes_frame``'s SQL
gives through Spark (the rules: feed/changes.py's module doc; tests compare the two).

The keys with a change in the range are found first; each key's versions then go in ref key
order, as the SQL's window does.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from python_ingest.exceptions import SluiceError
from python_ingest.feed.changes import CLOSED_BATCH, CLOSED_REF, Change, Point, image_columns

if TYPE_CHECKING:
    import pyarrow as pa

    from python_ingest.tables.native import NativeLake

# the history's own columns the feed reads besides the payload
FRAME = ("_row_key", "_ref_key", "_event_ts", "_batch_id", "_valid_from", "_valid_to",
         "_is_deleted", CLOSED_REF, CLOSED_BATCH)


def native_changes(lake: NativeLake, table: str, since: Point,
                   until: Point | None = None) -> list[Change]:
    """The feed of ``table`` between the points, read through ``lake`` (raises
    NativeUnavailable when the reader cannot: read through Spark then)."""
    columns = lake.column_names(table)
    missing = [c for c in (CLOSED_REF, CLOSED_BATCH) if c not in columns]
    if missing:
        raise SluiceError(f"{table} has no column {', '.join(missing)}: it was not written by "
                          "sluice's history (python_ingest/steps/history/rules.py), or by an "
                          "older one; the change feed needs them to find deletes")
    images = image_columns(columns)
    rows = lake.read(table, [*FRAME, *images])
    return feed_of(rows, images, since, until)


def feed_of(rows: pa.Table, images: list[str], since: Point,
            until: Point | None = None) -> list[Change]:
    """The changes between the points of a history held in ``rows`` (every column of FRAME
    and ``images``), ordered by source time, ref key and key (nulls first, as Spark's).

    All in Python lists: a pyarrow compute call with a Python value imports pandas, which
    alone costs more than the whole feed of the demo's history."""
    table = rows.select([*FRAME, *images])
    history = list(zip(*(_values(column) for column in table.columns), strict=True))
    changed = {r[KEY] for r in history if _within(r[BATCH], r[VALID_FROM], since, until) or (
        not r[DELETED] and r[CLOSED] is not None
        and _within(r[CLOSED_IN], r[VALID_TO], since, until))}
    versions: dict[str, list[tuple[Any, ...]]] = {}
    for row in history:
        if row[KEY] in changed:
            versions.setdefault(row[KEY], []).append(row)
    changes: list[Change] = []
    for key, found in versions.items():
        found.sort(key=lambda r: (r[REF] is not None, r[REF] or 0))
        changes += _key_changes(key, found, images, since, until)
    changes.sort(key=_order)
    return changes


# where FRAME's columns sit in a row of ``feed_of`` (the images follow)
KEY, REF, EVENT_TS, BATCH, VALID_FROM, VALID_TO, DELETED, CLOSED, CLOSED_IN = range(len(FRAME))


def _key_changes(key: str, versions: list[tuple[Any, ...]], images: list[str], since: Point,
                 until: Point | None) -> Iterator[Change]:
    """One key's changes in the range, from its versions in ref key order."""
    previous: tuple[Any, ...] | None = None
    before: dict[str, Any] | None = None  # the previous version's image
    for n, row in enumerate(versions):
        deleted = bool(row[DELETED])
        image = dict(zip(images, row[len(FRAME):], strict=True))
        if _within(row[BATCH], row[VALID_FROM], since, until):
            before_of = previous is not None and not bool(previous[DELETED])
            follows = previous is not None and previous[CLOSED] == row[REF]
            if deleted:
                op = "delete"
            elif not before_of or not follows:
                op = "insert"
            else:
                op = "update"
            keep_before = before_of and (deleted or follows)
            yield Change(op=op, key=key, ref_key=row[REF], event_ts=row[EVENT_TS],
                         batch_id=row[BATCH], before=before if keep_before else None,
                         after=None if deleted else image)
        closed = not deleted and row[CLOSED] is not None
        following = versions[n + 1][REF] if n + 1 < len(versions) else None
        if closed and following != row[CLOSED] and _within(
                row[CLOSED_IN], row[VALID_TO], since, until):
            # closed by a change that opened no version of the key: a delete
            yield Change(op="delete", key=key, ref_key=row[CLOSED], event_ts=row[VALID_TO],
                         batch_id=row[CLOSED_IN], before=image, after=None)
        previous, before = row, image


def _within(batch: int | None, moment: dt.datetime | None, since: Point,
            until: Point | None) -> bool:
    """One row's side of ``_mask`` (SQL: a null compares to nothing)."""
    for point, at_least in ((since, True), (until, False)):
        if point is None:
            continue
        value: Any = batch if point.batch is not None else moment
        bound: Any = point.batch if point.batch is not None else point.time
        if value is None or (value < bound if at_least else value > bound):
            return False
    return True


def _order(change: Change) -> tuple[Any, ...]:
    """Spark's ``order by event_ts, ref_key, key``: nulls first."""
    return (change.event_ts is not None, change.event_ts or dt.datetime.min,
            change.ref_key is not None, change.ref_key or 0, change.key)


def _values(column: Any) -> list[Any]:
    """A column's values as Spark's ``collect`` gives them: times naive (UTC), maps as dicts,
    binary as bytearray."""
    import pyarrow as pa

    kind = column.type
    if pa.types.is_timestamp(kind) and kind.tz is not None:
        # Arrow keeps UTC instants: dropping the zone leaves the UTC wall time
        column = column.cast(pa.timestamp(kind.unit))
        kind = column.type
    values = column.to_pylist()
    convert = _converter(kind, pa)
    return values if convert is None else [None if v is None else convert(v) for v in values]


def _converter(kind: Any, pa: Any) -> Any:
    """A function turning one pyarrow value of ``kind`` into Spark's (None: as it is)."""
    types = pa.types
    if types.is_timestamp(kind) and kind.tz is not None:
        return lambda v: v.astimezone(dt.UTC).replace(tzinfo=None)
    if types.is_binary(kind) or types.is_large_binary(kind):
        return bytearray
    if types.is_map(kind):
        inner = _converter(kind.item_type, pa)
        return lambda v: {k: (inner(x) if inner and x is not None else x) for k, x in v}
    if types.is_list(kind) or types.is_large_list(kind):
        inner = _converter(kind.value_type, pa)
        return None if inner is None else (
            lambda v: [inner(x) if x is not None else x for x in v])
    if types.is_struct(kind):
        fields = {kind.field(i).name: _converter(kind.field(i).type, pa)
                  for i in range(kind.num_fields)}
        if not any(fields.values()):
            return None
        return lambda v: {k: (fields[k](x) if fields.get(k) and x is not None else x)
                          for k, x in v.items()}
    return None
