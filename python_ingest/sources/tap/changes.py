"""What both taps publish for a row change (DBEvents): the change, its envelope and its
problems, and the keys every key kind gives it.

How a change is keyed follows the table's ``KeyChoice`` (registry.py): by its key columns (or
their text in ``sluice_row_id``); with a full-row identity by ``<digest>#<copy>``; in an
append-only changelog every change is keyed by its ref key, ``sluice_op`` saying what it was.
A value that cannot be converted is set to null and reported with the change (``Problem``); a
change whose key cannot be built is reported and not published. Each tap turns its own row
images into values (binlog/events.py, postgres/events.py) and keys them here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from python_ingest.changelog.keys import row_key_text
from python_ingest.sources.tap.columns import OPERATION, ROW_ID, ColumnSpec
from python_ingest.sources.tap.keys import RowCounts, row_digest
from python_ingest.sources.tap.registry import CHANGELOG, ROW, TableShape

INSERT, UPDATE, DELETE, SNAPSHOT = "insert", "update", "delete", "snapshot"


@dataclass(frozen=True)
class Envelope:
    """The envelope fields shared by the changes of one event."""

    source: str
    event_ts_ms: int
    data_center: str | None


@dataclass(frozen=True)
class Problem:
    """A value the tap could not convert or publish: set to null, or the change not sent."""

    column: str | None
    reason: str
    value: str | None = None


@dataclass
class Change:
    """One record to publish under ``key`` (None: its key could not be built, not published)."""

    key: str | None
    record: dict[str, Any]
    op: str
    problems: list[Problem] = field(default_factory=list)


class Table(Protocol):
    """A tapped table as the keys below need it (binlog's TappedTable, PostgreSQL's PgTable)."""

    shape: TableShape
    rows: RowCounts | None

    @property
    def specs(self) -> tuple[ColumnSpec, ...]: ...


def preview(value: Any) -> str | None:
    """A short text of a value for an error record."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        return f"{len(value)} bytes: {bytes(value[:48]).hex()}{'...' if len(value) > 48 else ''}"
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= 200 else f"{text[:200]}... ({len(text)} characters)"


def keyed(table: Table, values: dict[str, Any], problems: list[Problem],
          key_of: Callable[[dict[str, Any]], str], missing: bool = False) -> str | None:
    """The row key of a table keyed by columns, None (reported) when a key column has no
    value: it could not be converted, or ``missing`` (the stream did not carry it)."""
    failed = [p.column for p in problems if p.column in table.shape.key.columns]
    if failed or missing:
        problems.append(Problem(failed[0] if failed else None,
                                "a key column has no value: the change is not published"))
        return None
    key = key_of(values)
    if table.shape.key.synthetic:
        values[ROW_ID] = key
    return row_key_text(key)  # the _row_key the decoder makes of it: never empty


def copy_key(table: Table, values: dict[str, Any], add: bool) -> str:
    """The row id of a full-row identity: the copy an insert adds or a delete removes."""
    assert table.rows is not None
    digest = row_digest(table.specs, values)
    qualified = table.shape.qualified
    n = table.rows.add(qualified, digest) if add else table.rows.remove(qualified, digest)
    values[ROW_ID] = f"{digest}#{n}"
    return str(values[ROW_ID])


def changelog_key(values: dict[str, Any], ref: int | str, op: str) -> str:
    """An append-only changelog's key: the change's ref key; ``sluice_op`` says what it was."""
    values[ROW_ID], values[OPERATION] = str(ref), op
    return str(values[ROW_ID])


def snapshot_key(table: Table, values: dict[str, Any], ref: int, ordinal: int,
                 copies: dict[str, int], keyed_by_columns: Callable[[], str | None]) -> str | None:
    """The key of a snapshot row (``ordinal``-th; ``copies`` counts full-row identities in the
    snapshot); a table keyed by columns takes ``keyed_by_columns()``."""
    kind = table.shape.key.kind
    if kind == CHANGELOG:
        return changelog_key(values, f"{ref}.{ordinal}", SNAPSHOT)
    if kind == ROW:
        digest = row_digest(table.specs, values)
        copies[digest] = copies.get(digest, 0) + 1
        values[ROW_ID] = f"{digest}#{copies[digest]}"
        return str(values[ROW_ID])
    return keyed_by_columns()
