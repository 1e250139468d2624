"""The change feed computed in Python from a history table's rows, read without a JVM
(``tables.native``): the same changes, in the same order, as ``changes.changes_frame``'s SQL
gives through Spark (the rules: feed/changes.py's module doc; tests compare the two).

Only the keys with a change in the range are turned into Python rows (found with pyarrow
first); each key's versions then go in ref key order, as the SQL's window does.
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
                          "sluice's history (python_ingest/steps/history.py), or by an older one; "
                          "the change feed needs them to find deletes")
    images = image_columns(columns)
    rows = lake.read(table, [*FRAME, *images])
    return feed_of(rows, images, since, until)


def feed_of(rows: pa.Table, images: list[str], since: Point,
            until: Point | None = None) -> list[Change]:
    """The changes between the points of a history held in ``rows`` (every column of FRAME
    and ``images``), ordered by source time, ref key and key (nulls first, as Spark's)."""
    keys = _changed_keys(rows, since, until)
    if not keys:
        return []
    import pyarrow as pa
    import pyarrow.compute as pc

    picked = rows.filter(pc.is_in(rows["_row_key"], value_set=pa.array(sorted(keys))))
    versions: dict[str, list[dict[str, Any]]] = {}
    for row in _python_rows(picked):
        versions.setdefault(row["_row_key"], []).append(row)
    changes: list[Change] = []
    for key, found in versions.items():
        found.sort(key=lambda r: (r["_ref_key"] is not None, r["_ref_key"] or 0))
        changes += _key_changes(key, found, images, since, until)
    changes.sort(key=_order)
    return changes


def _key_changes(key: str, versions: list[dict[str, Any]], images: list[str], since: Point,
                 until: Point | None) -> Iterator[Change]:
    """One key's changes in the range, from its versions in ref key order."""
    previous: dict[str, Any] | None = None
    for n, row in enumerate(versions):
        deleted = bool(row["_is_deleted"])
        image = {c: row[c] for c in images}
        if _within(row["_batch_id"], row["_valid_from"], since, until):
            before_of = previous is not None and not bool(previous["_is_deleted"])
            follows = previous is not None and previous[CLOSED_REF] == row["_ref_key"]
            if deleted:
                op = "delete"
            elif not before_of or not follows:
                op = "insert"
            else:
                op = "update"
            keep_before = before_of and (deleted or follows)
            yield Change(op=op, key=key, ref_key=row["_ref_key"], event_ts=row["_event_ts"],
                         batch_id=row["_batch_id"],
                         before=_image(previous, images) if keep_before else None,
                         after=None if deleted else image)
        closed = not deleted and row[CLOSED_REF] is not None
        following = versions[n + 1]["_ref_key"] if n + 1 < len(versions) else None
        if closed and following != row[CLOSED_REF] and _within(
                row[CLOSED_BATCH], row["_valid_to"], since, until):
            # closed by a change that opened no version of the key: a delete
            yield Change(op="delete", key=key, ref_key=row[CLOSED_REF],
                         event_ts=row["_valid_to"], batch_id=row[CLOSED_BATCH], before=image,
                         after=None)
        previous = row


def _image(row: dict[str, Any] | None, images: list[str]) -> dict[str, Any] | None:
    return None if row is None else {c: row[c] for c in images}


def _changed_keys(rows: pa.Table, since: Point, until: Point | None) -> set[str]:
    """Keys with a version opened in the range, or one a delete closed in it."""
    import pyarrow.compute as pc

    opened = _mask(rows, "_batch_id", "_valid_from", since, until)
    is_closed = pc.and_kleene(pc.invert(pc.fill_null(rows["_is_deleted"], False)),
                        pc.is_valid(rows[CLOSED_REF]))
    closed = pc.and_kleene(is_closed, _mask(rows, CLOSED_BATCH, "_valid_to", since, until))
    either = pc.fill_null(pc.or_kleene(opened, closed), False)
    return set(rows["_row_key"].filter(either).to_pylist())


def _mask(rows: pa.Table, batch_col: str, time_col: str, since: Point,
          until: Point | None) -> Any:
    """The SQL's bounds as a pyarrow mask (null where a compared value is null; SQL's
    three-valued and, or: the Kleene kernels)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    mask: Any = pa.scalar(True)
    for point, compare in ((since, pc.greater_equal), (until, pc.less_equal)):
        if point is None:
            continue
        if point.batch is not None:
            term = compare(rows[batch_col], pa.scalar(point.batch, rows[batch_col].type))
        else:
            column = rows[time_col]
            assert point.time is not None
            moment = point.time.replace(tzinfo=dt.UTC) if getattr(
                column.type, "tz", None) else point.time
            term = compare(column, pa.scalar(moment, column.type))
        mask = pc.and_kleene(mask, term)
    return mask


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


def _python_rows(rows: pa.Table) -> Iterator[dict[str, Any]]:
    """Rows as Spark's ``collect`` gives their values: times naive (UTC), maps as dicts,
    binary as bytearray."""
    import pyarrow as pa

    names = rows.column_names
    convert = {n: _converter(rows.schema.field(n).type, pa) for n in names}
    for row in rows.to_pylist():
        yield {n: (convert[n](v) if convert[n] is not None and v is not None else v)
               for n, v in row.items()}


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
