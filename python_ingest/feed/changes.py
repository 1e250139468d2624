"""The change feed of a job: the inserts, updates (before and after images) and deletes between
two points, read from the job's history table (``lake.<lake model>__history``, docs/history.md).

Why the history and not the lake's own incremental query: the history holds one row per
version of a key, every change a version, each with the ref key and batch that opened it, so a
change between two points is a version opened between them, and its before image is the key's
previous version (by ref key). A snapshot read of the history merges what a merge-on-read
table holds in log files (Hudi) or delete files (Iceberg) not yet compacted, so nothing is
missed there, which Iceberg's changelog view (no merge-on-read deletes) and Hudi's incremental
query (file slices only) cannot promise.

A version opened in the range is

* an **insert** when the key had no earlier version, or the earlier one was deleted (a
  ``new_record`` delete version, or a version a delete closed: its ``_closed_ref_key`` is not
  this version's ref key);
* an **update** otherwise, its before image the previous version (by ref key);
* a **delete** when it is a delete version (``_is_deleted``: ``hard_deletes: new_record``, or
  the marker of a delete that found no version to close, listed without a before image).

With ``hard_deletes: invalidate`` (and for a TRUNCATE) a delete writes no version: it closes
the current one, whose ``_closed_ref_key`` then names a change that opened no version of the
key. The feed lists it as a delete with that ref key, in the batch that closed the version
(``_closed_batch_id``), at the version's ``_valid_to``.

The points: a batch id (``_batch_id``, the batch that opened the version; a delete's
``_closed_batch_id``) or a time (the version's ``_valid_from``, the source commit time of its
change; a delete's ``_valid_to``), both bounds included. The schema and rules of the history:
python_ingest/steps/history/rules.py.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from python_ingest.exceptions import NoHistoryTableError, SluiceError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from python_ingest.config import JobConfig
    from python_ingest.tables.names import JobTables

# the columns the history adds to the lake's, and the lake's own framework columns: neither is
# part of a before or after image (the image is the row's payload)
VALIDITY_COLUMNS = ("_valid_from", "_valid_to", "_is_current")
CLOSED_REF = "_closed_ref_key"  # the change that closed a version (the next one, or a delete)
CLOSED_BATCH = "_closed_batch_id"  # the batch that closed it
OPS = ("insert", "update", "delete")


@dataclass(frozen=True)
class Point:
    """One end of a feed's range: a batch id or a time (UTC, naive as Spark's timestamps)."""

    batch: int | None = None
    time: dt.datetime | None = None

    def __str__(self) -> str:
        return f"batch {self.batch}" if self.batch is not None else f"{self.time} UTC"


def parse_point(text: str, option: str = "--since") -> Point:
    """``12`` → batch 12; ``2026-03-01``, ``2026-03-01T08:00``, ``...+02:00`` → that time in
    UTC (a time without offset is UTC)."""
    text = text.strip()
    if re.fullmatch(r"\d+", text):
        return Point(batch=int(text))
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise SluiceError(f"{option} {text!r} is neither a batch id (a whole number, as "
                          "`sluice status --history` lists them) nor an ISO time such as "
                          "2026-03-01 or 2026-03-01T08:00:00+01:00") from None
    if moment.tzinfo is not None:
        moment = moment.astimezone(dt.UTC).replace(tzinfo=None)
    return Point(time=moment)


def check_range(since: Point, until: Point | None) -> None:
    """Refuse a range that ends before it starts (it would list nothing, silently)."""
    if until is None:
        return
    if (since.batch is not None and until.batch is not None and until.batch < since.batch) or (
            since.time is not None and until.time is not None and until.time < since.time):
        raise SluiceError(f"--until {until} lies before --since {since}: nothing can change "
                          "between them; swap them")


@dataclass(frozen=True)
class Change:
    """One change of the feed: what happened to a key, in source order (ref key)."""

    op: str  # insert | update | delete
    key: str  # the row key (_row_key)
    ref_key: int | None  # the change's ref key (None: an invalidated delete, which has none)
    event_ts: dt.datetime | None  # its source commit time
    batch_id: int | None  # the batch that wrote it (None: unknown, see the module doc)
    before: dict[str, Any] | None  # the key's row before (updates, deletes)
    after: dict[str, Any] | None  # and after (inserts, updates)

    def as_dict(self) -> dict[str, Any]:
        """The JSON object of ``--json`` (times ISO, decimals as text: exact)."""
        return {"op": self.op, "key": self.key, "ref_key": self.ref_key,
                "event_ts": None if self.event_ts is None else self.event_ts.isoformat(),
                "batch_id": self.batch_id, "before": json_image(self.before),
                "after": json_image(self.after)}

    def as_json(self) -> str:
        return json.dumps(self.as_dict(), ensure_ascii=False, sort_keys=False)

    def summary(self) -> str:
        """One line: an insert's values, an update's changed columns ``before -> after``, a
        delete's old values."""
        if self.op == "update" and self.before is not None and self.after is not None:
            parts = [f"{c}: {_text(self.before.get(c))} -> {_text(self.after.get(c))}"
                     for c in self.changed_columns()]
            return ", ".join(parts) or "(no payload column changed)"
        image = self.after if self.op == "insert" else self.before
        if image is None:
            return "(no earlier version)"
        values = ", ".join(f"{c}={_text(v)}" for c, v in image.items())
        return values if self.op == "insert" else f"was {values}"

    def changed_columns(self) -> list[str]:
        """The columns an update changed (all of the image for inserts and deletes)."""
        if self.before is None or self.after is None:
            return list((self.after or self.before or {}).keys())
        return [c for c in self.after if self.after[c] != self.before.get(c)]


def _text(value: Any) -> str:
    return "null" if value is None else str(value)


def json_image(image: dict[str, Any] | None) -> dict[str, Any] | None:
    """A row image as ``--json`` writes it: decimals as text, times ISO, bytes as hex."""
    if image is None:
        return None
    return {k: _value(v) for k, v in image.items()}


def _value(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex()
    if isinstance(value, dict):
        return {k: _value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_value(v) for v in value]
    if hasattr(value, "asDict"):  # a struct column
        return _value(value.asDict(recursive=True))
    return value


def history_name(tables: JobTables) -> str | None:
    """``lake.<lake model>__history``, None for a job without a lake model."""
    return tables.history


def history_table(spark: SparkSession, job: JobConfig, tables: JobTables) -> str:
    """The job's history table, known by name to ``spark``; raises NoHistoryTableError (what
    to do) when the job has none."""
    from python_ingest.tables.formats import table_exists

    table = history_name(tables)
    if table is None or not table_exists(spark, table):
        lake_model = tables.models.lake if tables.models else None
        raise NoHistoryTableError(job.name, lake_model, table)
    return table


def image_columns(columns: list[str]) -> list[str]:
    """The payload columns of a history table: every column not sluice's own (``_``)."""
    return [c for c in columns if not c.startswith("_")]


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _literal(moment: dt.datetime) -> str:
    return f"timestamp'{moment.isoformat(sep=' ')}'"


def _bounds(column: str, since: Point, until: Point | None, batch_col: str) -> str:
    """The SQL condition for ``column`` (a time) or ``batch_col`` between the points."""
    terms = []
    for point, op in ((since, ">="), (until, "<=")):
        if point is None:
            continue
        if point.batch is not None:
            terms.append(f"{batch_col} {op} {point.batch}")
        else:
            assert point.time is not None
            terms.append(f"{column} {op} {_literal(point.time)}")
    return " and ".join(terms) or "true"


def changes_frame(spark: SparkSession, table: str, since: Point,
                  until: Point | None = None) -> DataFrame:
    """The feed as a DataFrame: op, key, ref_key, event_ts, batch_id, before, after (structs
    of the payload columns), in source order. Only the keys with a change in the range are
    read whole (their neighbouring versions give the before images)."""
    columns = [f.name for f in spark.table(table).schema.fields]
    missing = [c for c in (CLOSED_REF, CLOSED_BATCH) if c not in columns]
    if missing:
        raise SluiceError(f"{table} has no column {', '.join(missing)}: it was not written by "
                          "sluice's history (python_ingest/steps/history/rules.py), or by an "
                          "older one; the change feed needs them to find deletes")
    payload = ", ".join(f"'{c}', {_quoted(c)}" for c in image_columns(columns))
    image = f"named_struct({payload})"
    opened = _bounds("_valid_from", since, until, "_batch_id")
    closed = _bounds("_valid_to", since, until, CLOSED_BATCH)
    # a version closed by a change that opened no version of the key is closed by a delete
    # (hard_deletes: invalidate, TRUNCATE): its successor, if any, is a re-insert
    sql = f"""
    with

    history as (

        select
            *,
            not coalesce(_is_deleted, false) and {CLOSED_REF} is not null as _is_closed
        from {table}

    ),

    changed_keys as (

        select distinct _row_key from history where {opened}
        union
        select distinct _row_key from history where _is_closed and {closed}

    ),

    versions as (

        select
            _row_key,
            _ref_key,
            _event_ts,
            _batch_id,
            _valid_from,
            _valid_to,
            {CLOSED_REF} as _closed_ref,
            {CLOSED_BATCH},
            coalesce(_is_deleted, false) as _deleted,
            _is_closed,
            {image} as _image,
            lag(struct(coalesce(_is_deleted, false) as deleted, {CLOSED_REF} as closed_ref,
                       {image} as image)) over by_ref as _previous,
            lead(_ref_key) over by_ref as _next_ref
        from history
        left semi join changed_keys using (_row_key)
        window by_ref as (partition by _row_key order by _ref_key)

    ),

    opened as (

        select
            case
                when _deleted then 'delete'
                when _previous is null or _previous.deleted
                    or not (_previous.closed_ref <=> _ref_key) then 'insert'
                else 'update'
            end as op,
            _row_key as key,
            _ref_key as ref_key,
            _event_ts as event_ts,
            _batch_id as batch_id,
            case
                when _previous is null or _previous.deleted then null
                when not _deleted and not (_previous.closed_ref <=> _ref_key) then null
                else _previous.image
            end as before,
            case when _deleted then null else _image end as after
        from versions
        where {opened}

    ),

    closed_by_deletes as (

        select
            'delete' as op,
            _row_key as key,
            _closed_ref as ref_key,
            _valid_to as event_ts,
            {CLOSED_BATCH} as batch_id,
            _image as before,
            cast(null as {_struct_type(spark, table, columns)}) as after
        from versions
        where _is_closed and not (_next_ref <=> _closed_ref) and {closed}

    ),

    feed as (

        select * from opened
        union all
        select * from closed_by_deletes

    )

    select * from feed
    order by event_ts, ref_key, key
    """
    return spark.sql(sql)


def _struct_type(spark: SparkSession, table: str, columns: list[str]) -> str:
    """The SQL type of the image struct (for a typed null)."""
    fields = {f.name: f.dataType.simpleString() for f in spark.table(table).schema.fields}
    inner = ", ".join(f"{_quoted(c)}: {fields[c]}" for c in image_columns(columns))
    return f"struct<{inner}>"


def read_changes(spark: SparkSession, table: str, since: Point,
                 until: Point | None = None) -> Iterator[Change]:
    """The feed's changes one by one (streamed from Spark, never all on the driver at once)."""
    for row in changes_frame(spark, table, since, until).toLocalIterator():
        yield Change(op=row["op"], key=row["key"], ref_key=row["ref_key"],
                     event_ts=row["event_ts"], batch_id=row["batch_id"],
                     before=None if row["before"] is None else row["before"].asDict(True),
                     after=None if row["after"] is None else row["after"].asDict(True))
