"""One binlog row change → changelog records (DBEvents).

- insert: the full row, ``_changed_columns`` null (every column set);
- update: the full after image, ``_changed_columns`` null like an insert: the event sets every
  column (DBEvents: changed columns are "the columns this event set"), so the merge applies it
  as an upsert, and it creates a row the lake lacks (issue #9.5: a bootstrap chunk published
  after the update, an insert the fork rejected). Which columns differ decides only whether
  anything is published (an update that changes nothing publishes nothing); an update of the
  key is a delete of the old key followed by an insert of the new one;
- delete: the before image with ``_is_deleted`` true.

Keys, the change and its problems are the tap core's (tap/changes.py); with a full-row
identity an update is a delete of the old copy and an insert of the new one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from python_ingest.sources.binlog.columns import ColumnSpec, TextDecoder, decode_text, to_avro
from python_ingest.sources.binlog.position import row_refs
from python_ingest.sources.tap.changes import (
    DELETE,
    INSERT,
    SNAPSHOT,
    UPDATE,
    Change,
    Envelope,
    Problem,
    changelog_key,
    copy_key,
    keyed,
    preview,
    snapshot_key,
)
from python_ingest.sources.tap.keys import RowCounts
from python_ingest.sources.tap.producer import Encoder
from python_ingest.sources.tap.registry import CHANGELOG, ROW, TableShape

__all__ = ["DELETE", "INSERT", "SNAPSHOT", "UPDATE", "Change", "Envelope", "Problem",
           "TappedTable", "changes", "convert", "snapshot_change", "to_record"]


@dataclass
class TappedTable:
    """What the tap needs to publish one table's changes."""

    shape: TableShape
    schema_id: int
    encoder: Encoder
    topic: str
    text: TextDecoder = decode_text  # bytes of a text column -> str (charsets.Charsets.decode)
    rows: RowCounts | None = None  # the copies of a full-row-identity table (the tap's)

    @property
    def specs(self) -> tuple[ColumnSpec, ...]:
        return self.shape.columns


def convert(table: TappedTable, raw: dict[str, Any],
            problems: list[Problem] | None = None) -> dict[str, Any]:
    """The Avro values of a row image; with ``problems``, a value that cannot be converted is
    null and reported there (else the error propagates)."""
    out: dict[str, Any] = {}
    for spec in table.specs:
        value = raw.get(spec.name)
        try:
            out[spec.name] = to_avro(spec, value, table.text)
        except Exception as exc:
            if problems is None:
                raise
            problems.append(Problem(spec.name, f"cannot convert the {spec.kind} value: "
                                    f"{type(exc).__name__}: {exc}", preview(value)))
            out[spec.name] = None
    return out


def to_record(table: TappedTable, values: dict[str, Any], ref: int, env: Envelope,
              deleted: bool = False) -> dict[str, Any]:
    """The event of a full row image (``_changed_columns`` null: every column is set)."""
    event = {spec.name: values.get(spec.name) for spec in table.shape.payload}
    event.update(_ref_key=ref, _changed_columns=None, _source=env.source,
                 _event_ts=env.event_ts_ms, _is_deleted=deleted, _force_update=False,
                 _data_center=env.data_center)
    return event


def _keyed(table: TappedTable, values: dict[str, Any], problems: list[Problem]) -> str | None:
    return keyed(table, values, problems, table.shape.key_of)


def snapshot_change(table: TappedTable, raw: dict[str, Any], ref: int, env: Envelope,
                    ordinal: int, copies: dict[str, int]) -> Change:
    """A bootstrap row (``ordinal``-th of the snapshot; ``copies`` counts full-row identities)."""
    problems: list[Problem] = []
    values = convert(table, raw, problems)
    key = snapshot_key(table, values, ref, ordinal, copies,
                       lambda: _keyed(table, values, problems))
    return Change(key, to_record(table, values, ref, env), SNAPSHOT, problems)


def _changelog(table: TappedTable, op: str, raw: dict[str, Any], ref: int,
               env: Envelope) -> Change:
    problems: list[Problem] = []
    values = convert(table, raw, problems)
    key = changelog_key(values, ref, op)
    return Change(key, to_record(table, values, ref, env), op, problems)


def changes(table: TappedTable, kind: str, rows: list[dict[str, Any]], file_index: int,
            event_end: int, env: Envelope) -> list[Change]:
    """The changes of one rows event, in binlog order."""
    mode = table.shape.key.kind
    out: list[Change] = []
    if kind in (INSERT, DELETE):
        for ref, row in zip(row_refs(file_index, event_end, len(rows)), rows, strict=True):
            if mode == CHANGELOG:
                out.append(_changelog(table, kind, row["values"], ref, env))
                continue
            problems: list[Problem] = []
            values = convert(table, row["values"], problems)
            key = copy_key(table, values, kind == INSERT) if mode == ROW else \
                _keyed(table, values, problems)
            out.append(Change(key, to_record(table, values, ref, env, deleted=kind == DELETE),
                              kind, problems))
        return out
    refs = row_refs(file_index, event_end, 2 * len(rows))
    for i, row in enumerate(rows):
        if mode == CHANGELOG:
            out.append(_changelog(table, UPDATE, row["after_values"], refs[2 * i + 1], env))
            continue
        before_problems: list[Problem] = []
        after_problems: list[Problem] = []
        before = convert(table, row["before_values"], before_problems)
        after = convert(table, row["after_values"], after_problems)
        if all(before[s.name] == after[s.name] for s in table.specs):
            continue  # an update that changes nothing publishes nothing
        old_key: str | None
        new_key: str | None
        if mode == ROW:
            old_key, new_key = copy_key(table, before, False), copy_key(table, after, True)
        else:
            old_key = _keyed(table, before, before_problems)
            new_key = _keyed(table, after, after_problems)
        if old_key != new_key or mode == ROW:
            out.append(Change(old_key, to_record(table, before, refs[2 * i], env, deleted=True),
                              DELETE, before_problems))
            out.append(Change(new_key, to_record(table, after, refs[2 * i + 1], env), INSERT,
                              after_problems))
        else:
            out.append(Change(new_key, to_record(table, after, refs[2 * i + 1], env), UPDATE,
                              after_problems))  # a full image: an upsert (module doc)
    return out
