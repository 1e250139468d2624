"""One binlog row change → changelog records (DBEvents).

- insert: the full row, ``_changed_columns`` null (every column set);
- update: the full after image, ``_changed_columns`` null like an insert: the event sets every
  column (DBEvents: changed columns are "the columns this event set"), so the merge applies it
  as an upsert, and it creates a row the lake lacks (issue #9.5: a bootstrap chunk published
  after the update, an insert the fork rejected). Which columns differ decides only whether
  anything is published (an update that changes nothing publishes nothing); an update of the
  key is a delete of the old key followed by an insert of the new one;
- delete: the before image with ``_is_deleted`` true.

A session may set its own ``binlog_row_image`` (the global FULL is all the tap can check), and
then a rows event carries only some columns (``Present``: its column bitmaps). An update's
after image is completed from its before image; if a column is in neither (MINIMAL: only the
key before, the set columns after; NOBLOB: an unchanged BLOB/TEXT), the update is *partial*:
``_changed_columns`` names the columns it carries and the merge keeps the lake's value of the
others, keyed by the before image's key. A delete needs only its key. What cannot be published
without inventing values stops the table naming the setting (``PartialRowImage``): an insert
without every column (MINIMAL leaves out the defaulted ones), a key changed by a partial
update, a full-row identity or a changelog table without the whole row.

Keys, the change and its problems are the tap core's (tap/changes.py); with a full-row
identity an update is a delete of the old copy and an insert of the new one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from python_ingest.exceptions import PartialRowImage
from python_ingest.sources.binlog.columns import TextDecoder, decode_text, to_avro
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
from python_ingest.sources.tap.columns import ColumnSpec
from python_ingest.sources.tap.keys import RowCounts
from python_ingest.sources.tap.producer import Encoder
from python_ingest.sources.tap.registry import CHANGELOG, ROW, TableShape

__all__ = ["DELETE", "FULL", "INSERT", "SNAPSHOT", "UPDATE", "Change", "Envelope", "Present",
           "Problem", "TappedTable", "changes", "convert", "present", "snapshot_change",
           "to_record"]

# the columns a rows event's images carry, (first image, an update's after image): None, all
Present = tuple[frozenset[str] | None, frozenset[str] | None]
FULL: Present = (None, None)


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


def present(event: Any) -> Present:
    """The columns a rows event's images carry, from its column bitmaps (None: every one)."""
    names = [c.name for c in event.columns]

    def of(bitmap: bytes | None) -> frozenset[str] | None:
        if bitmap is None:
            return None
        found = frozenset(n for i, n in enumerate(names) if bitmap[i // 8] >> (i % 8) & 1)
        return None if len(found) == len(names) else found

    return (of(getattr(event, "columns_present_bitmap", None)),
            of(getattr(event, "columns_present_bitmap2", None)))


def _missing(table: TappedTable, carried: frozenset[str] | None) -> list[str]:
    return [] if carried is None else [s.name for s in table.specs if s.name not in carried]


def _partial(table: TappedTable, what: str, missing: list[str]) -> PartialRowImage:
    return PartialRowImage(
        f"{what} of {table.shape.qualified} lacks column(s) {', '.join(missing)}: the session "
        "that wrote it had binlog_row_image=MINIMAL or NOBLOB (a session may set its own; the "
        "global FULL is what the tap checks), so the binlog does not hold their values. Keep "
        "binlog_row_image=FULL in every session writing tapped tables, then bootstrap the "
        "table (docs/binlog-tap.md, \"Partial row images\")")


def _partial_record(table: TappedTable, values: dict[str, Any], ref: int, env: Envelope,
                    missing: list[str]) -> dict[str, Any]:
    """A partial update: the columns the event carries, ``_changed_columns`` naming them."""
    record = to_record(table, values, ref, env)
    record["_changed_columns"] = [s.name for s in table.shape.payload if s.name not in missing]
    return record


def changes(table: TappedTable, kind: str, rows: list[dict[str, Any]], file_index: int,
            event_end: int, env: Envelope, images: Present = FULL) -> list[Change]:
    """The changes of one rows event, in binlog order (``images``: the columns its images
    carry; PartialRowImage when they are too few to publish, module doc)."""
    mode = table.shape.key.kind
    out: list[Change] = []
    if kind in (INSERT, DELETE):
        missing = _missing(table, images[0])
        if missing and (kind == INSERT or mode in (ROW, CHANGELOG) or
                        any(c in missing for c in table.shape.key.columns)):
            raise _partial(table, f"{'an insert' if kind == INSERT else 'a delete'} event",
                           missing)
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
    before_in, after_in = images
    carried = None if before_in is None or after_in is None else before_in | after_in
    missing = _missing(table, carried)  # in neither image: the update is partial
    lacking_before = _missing(table, before_in)
    if (missing and mode in (ROW, CHANGELOG)) or (lacking_before and mode == ROW) or \
            any(c in lacking_before for c in table.shape.key.columns):
        raise _partial(table, "an update event", missing or lacking_before)
    refs = row_refs(file_index, event_end, 2 * len(rows))
    for i, row in enumerate(rows):
        raw_before = row["before_values"]
        raw_after = row["after_values"] if after_in is None else \
            {s.name: row["after_values"].get(s.name) if s.name in after_in
             else raw_before.get(s.name) for s in table.specs}  # completed from the before
        if mode == CHANGELOG:
            out.append(_changelog(table, UPDATE, raw_after, refs[2 * i + 1], env))
            continue
        before_problems: list[Problem] = []
        after_problems: list[Problem] = []
        before = convert(table, raw_before, before_problems)
        after = convert(table, raw_after, after_problems)
        if not lacking_before and all(before[s.name] == after[s.name] for s in table.specs):
            continue  # an update that changes nothing publishes nothing
        old_key: str | None
        new_key: str | None
        if mode == ROW:
            old_key, new_key = copy_key(table, before, False), copy_key(table, after, True)
        else:
            old_key = _keyed(table, before, before_problems)
            new_key = _keyed(table, after, after_problems)
        if (old_key != new_key or mode == ROW) and missing:
            raise _partial(table, "an update of the key", missing)
        if old_key != new_key or mode == ROW:
            out.append(Change(old_key, to_record(table, before, refs[2 * i], env, deleted=True),
                              DELETE, before_problems))
            out.append(Change(new_key, to_record(table, after, refs[2 * i + 1], env), INSERT,
                              after_problems))
        elif missing:  # keyed by the before image's key; the merge keeps the other columns
            out.append(Change(old_key, _partial_record(table, after, refs[2 * i + 1], env,
                                                       missing), UPDATE, after_problems))
        else:
            out.append(Change(new_key, to_record(table, after, refs[2 * i + 1], env), UPDATE,
                              after_problems))  # a full image: an upsert (module doc)
    return out
