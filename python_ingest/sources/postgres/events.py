"""One pgoutput row change → changelog records (DBEvents), as the binlog tap publishes them
(binlog/events.py) with what logical replication adds:

- insert: the full row, ``_changed_columns`` null;
- update: the new row. A TOASTed value the update left unchanged is not in the WAL
  (``UNCHANGED``): under REPLICA IDENTITY FULL it is taken from the old row; otherwise the
  update is *partial*: ``_changed_columns`` names every column it carries, and the merge keeps
  the lake's value of the others (never a NULL written over it). An update of the key is a
  delete of the old key and an insert of the new one, a full image always: the tap fills in
  the values the update left out (moves.py), and when it cannot (the row is gone now) only the
  delete is published and the new key is *gone* (``PgTable.gone``) until the stream deletes
  or inserts it: its partial updates are dropped, never sent to a lake that lacks the row;
- delete: the old row (REPLICA IDENTITY FULL) or only its key columns, ``_is_deleted`` true.

Keys follow the table's KeyChoice (tap/changes.py, tap/registry.py): key columns (or their
text in ``sluice_row_id``), a full-row identity (REPLICA IDENTITY FULL without a key: the old
row names the copy an update or delete removes), or an append-only changelog.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from python_ingest.changelog.schema import KEY_SEPARATOR
from python_ingest.sources.postgres.columns import Converter
from python_ingest.sources.postgres.pgoutput import UNCHANGED
from python_ingest.sources.tap import changes
from python_ingest.sources.tap.changes import Change, Envelope, Problem
from python_ingest.sources.tap.columns import ColumnSpec, key_text
from python_ingest.sources.tap.keys import RowCounts
from python_ingest.sources.tap.producer import Encoder
from python_ingest.sources.tap.registry import CHANGELOG, ROW, TableShape


@dataclass
class PgTable:
    """What the tap needs to publish one table's changes."""

    shape: TableShape
    schema_id: int
    encoder: Encoder
    topic: str
    converters: tuple[Converter, ...]  # per column, in table order
    full_identity: bool  # REPLICA IDENTITY FULL: the old row comes whole
    rows: RowCounts | None = None  # full-row identity: the copies (the tap's)
    gone: set[str] = field(default_factory=set)  # keys the lake cannot have (moves.py)
    names: tuple[str, ...] = field(init=False)  # every field of an event's row part
    key_specs: tuple[ColumnSpec, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.names = tuple(s.name for s in self.shape.payload)
        by_name = {s.name: s for s in self.shape.payload}
        self.key_specs = tuple(by_name[c] for c in self.shape.key.columns)

    @property
    def specs(self) -> tuple[ColumnSpec, ...]:
        return self.shape.columns

    def key_of(self, values: dict[str, Any]) -> str:
        """The row key (TableShape.key_of, its common case without the look-ups)."""
        if self.shape.key.synthetic or len(self.key_specs) != 1:
            parts = [key_text(s, values[s.name]) for s in self.key_specs] \
                if not self.shape.key.synthetic else []
            if self.shape.key.synthetic or any(KEY_SEPARATOR in p for p in parts):
                return self.shape.key_of(values)  # synthetic, or the error it raises
            return KEY_SEPARATOR.join(parts)
        spec = self.key_specs[0]
        return key_text(spec, values[spec.name])


def convert(table: PgTable, texts: list[Any], problems: list[Problem]) -> dict[str, Any]:
    """The Avro values of a tuple's texts; a value that cannot be converted is null and
    reported in ``problems``; an unchanged TOASTed value stays UNCHANGED."""
    out: dict[str, Any] = {}
    for spec, convert_one, text in zip(table.specs, table.converters, texts, strict=True):
        if text is None or text is UNCHANGED:
            out[spec.name] = text
            continue
        try:
            out[spec.name] = convert_one(text)
        except Exception as exc:
            problems.append(Problem(spec.name, f"cannot convert the {spec.kind} value: "
                                    f"{type(exc).__name__}: {exc}", changes.preview(text)))
            out[spec.name] = None
    return out


def _keyed(table: PgTable, values: dict[str, Any], problems: list[Problem]) -> str | None:
    return changes.keyed(table, values, problems, table.key_of,
                 any(values.get(c) is UNCHANGED for c in table.shape.key.columns))


def _record(table: PgTable, values: dict[str, Any], ref: int, env: Envelope,
            deleted: bool = False) -> dict[str, Any]:
    record = {name: values.get(name) for name in table.names}
    record.update(_ref_key=ref, _changed_columns=None, _source=env.source,
                  _event_ts=env.event_ts_ms, _is_deleted=deleted, _force_update=False,
                  _data_center=env.data_center)
    if UNCHANGED in values.values():  # a partial update: the columns it sets
        unchanged = [n for n in table.names if values.get(n) is UNCHANGED]
        for name in unchanged:
            record[name] = None
        record["_changed_columns"] = [n for n in table.names if n not in unchanged]
    return record


def insert(table: PgTable, new: list[Any], ref: int, env: Envelope) -> Change:
    return _whole_row(table, new, ref, env, changes.INSERT)


def delete(table: PgTable, old: list[Any], ref: int, env: Envelope) -> Change:
    return _whole_row(table, old, ref, env, changes.DELETE)


def _whole_row(table: PgTable, row: list[Any], ref: int, env: Envelope, op: str) -> Change:
    """An insert (its new row) or a delete (its old row, or only its key columns)."""
    problems: list[Problem] = []
    values = convert(table, row, problems)
    mode = table.shape.key.kind
    if mode == CHANGELOG:
        return Change(changes.changelog_key(values, ref, op), _record(table, values, ref, env),
                      op, problems)
    key = changes.copy_key(table, values, op == changes.INSERT) if mode == ROW else \
        _keyed(table, values, problems)
    table.gone.discard(key)  # type: ignore[arg-type]
    return Change(key, _record(table, values, ref, env, deleted=op == changes.DELETE), op,
                  problems)


def update(table: PgTable, old: list[Any] | None, new: list[Any], first_ref: int,
           env: Envelope, filled: list[Any] | None = None) -> list[Change]:
    """The changes of one update: none, one, or a delete and an insert (refs ``first_ref``
    and ``first_ref + 1``; the caller counts ``max(len(result), 1)`` positions). ``filled``:
    a key change's new row with the values it left out read from the table (moves.py), None
    when that row is gone now."""
    if old is not None and table.full_identity:  # unchanged TOAST: the old row's value
        new = [o if n is UNCHANGED else n for o, n in zip(old, new, strict=True)]
    elif filled is not None:
        new = filled
    elif old is not None:  # the old key: a TOASTed key column left alone is there
        new = [o if n is UNCHANGED and o is not None else n
               for o, n in zip(old, new, strict=True)]
    mode = table.shape.key.kind
    problems: list[Problem] = []
    after = convert(table, new, problems)
    if mode == CHANGELOG:
        return [Change(changes.changelog_key(after, first_ref, changes.UPDATE),
                       _record(table, after, first_ref, env), changes.UPDATE, problems)]
    if mode == ROW:
        if old is None:  # cannot be: a full-row identity needs REPLICA IDENTITY FULL
            problems.append(Problem(None, "an update without the old row (REPLICA IDENTITY "
                                    "FULL is needed): the change is not published"))
            return [Change(None, _record(table, after, first_ref, env), changes.UPDATE,
                           problems)]
        before_problems: list[Problem] = []
        before = convert(table, old, before_problems)
        if all(before[s.name] == after[s.name] for s in table.specs):
            return []
        gone = Change(changes.copy_key(table, before, False),
                      _record(table, before, first_ref, env, deleted=True), changes.DELETE,
                      before_problems)
        return [gone, Change(changes.copy_key(table, after, True),
                             _record(table, after, first_ref + 1, env), changes.INSERT, problems)]
    new_key = _keyed(table, after, problems)
    partial = UNCHANGED in after.values()
    if old is not None:
        before_problems = []
        before = convert(table, old, before_problems)
        if table.full_identity and all(before[s.name] == after[s.name] for s in table.specs):
            return []  # an update that changes nothing publishes nothing
        old_key = _keyed(table, before, before_problems)
        if old_key != new_key:
            gone = Change(old_key, _record(table, before, first_ref, env, deleted=True),
                          changes.DELETE, before_problems)
            table.gone.discard(old_key)  # type: ignore[arg-type]
            if partial and new_key is not None:  # the row is gone now: its removal follows
                table.gone.add(new_key)
                return [gone]
            table.gone.discard(new_key)  # type: ignore[arg-type]
            return [gone, Change(new_key, _record(table, after, first_ref + 1, env), changes.INSERT,
                                 problems)]
    if new_key in table.gone:
        if partial:
            return []  # a key the lake cannot have, whose removal follows (moves.py)
        table.gone.discard(new_key)
    return [Change(new_key, _record(table, after, first_ref, env), changes.UPDATE, problems)]


def snapshot(table: PgTable, texts: list[Any], ref: int, env: Envelope, ordinal: int,
             copies: dict[str, int]) -> Change:
    """A snapshot row (``ordinal``-th; ``copies`` counts full-row identities)."""
    problems: list[Problem] = []
    values = convert(table, texts, problems)
    key = changes.snapshot_key(table, values, ref, ordinal, copies,
                       lambda: _keyed(table, values, problems))
    return Change(key, _record(table, values, ref, env), changes.SNAPSHOT, problems)
