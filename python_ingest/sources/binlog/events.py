"""One binlog row change → changelog records (DBEvents).

- insert: the full row, ``_changed_columns`` null (every column set);
- update: the full after image, ``_changed_columns`` = the columns whose values differ between
  the before and after images (an update that changes nothing publishes nothing); an update of
  the primary key is a delete of the old key followed by an insert of the new one;
- delete: the before image with ``_is_deleted`` true.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from python_ingest.changelog.schema import KEY_SEPARATOR
from python_ingest.sources.binlog.columns import ColumnSpec, key_text, to_avro
from python_ingest.sources.binlog.position import row_refs
from python_ingest.sources.binlog.producer import Encoder
from python_ingest.sources.binlog.registry import TableShape

INSERT, UPDATE, DELETE = "insert", "update", "delete"


@dataclass
class TappedTable:
    """What the tap needs to publish one table's changes."""

    shape: TableShape
    schema_id: int
    encoder: Encoder
    topic: str

    @property
    def specs(self) -> tuple[ColumnSpec, ...]:
        return self.shape.columns


@dataclass(frozen=True)
class Envelope:
    """The envelope fields shared by the changes of one event."""

    source: str
    event_ts_ms: int
    data_center: str | None


def row_key(table: TappedTable, values: dict[str, Any]) -> str:
    return KEY_SEPARATOR.join(key_text(values[c]) for c in table.shape.primary_key)


def to_record(table: TappedTable, values: dict[str, Any], ref: int, env: Envelope,
              changed: list[str] | None = None, deleted: bool = False) -> dict[str, Any]:
    event = {spec.name: values.get(spec.name) for spec in table.specs}
    event.update(_ref_key=ref, _changed_columns=changed, _source=env.source,
              _event_ts=env.event_ts_ms, _is_deleted=deleted, _force_update=False,
              _data_center=env.data_center)
    return event


def convert(table: TappedTable, raw: dict[str, Any]) -> dict[str, Any]:
    return {spec.name: to_avro(spec, raw.get(spec.name)) for spec in table.specs}


def changes(table: TappedTable, kind: str, rows: list[dict[str, Any]], file_index: int,
            event_end: int, env: Envelope) -> list[tuple[str, dict[str, Any]]]:
    """The (row key, record) pairs of one rows event, in binlog order."""
    out: list[tuple[str, dict[str, Any]]] = []
    if kind == INSERT:
        for ref, row in zip(row_refs(file_index, event_end, len(rows)), rows, strict=True):
            values = convert(table, row["values"])
            out.append((row_key(table, values), to_record(table, values, ref, env)))
    elif kind == DELETE:
        for ref, row in zip(row_refs(file_index, event_end, len(rows)), rows, strict=True):
            values = convert(table, row["values"])
            out.append((row_key(table, values), to_record(table, values, ref, env, deleted=True)))
    else:
        refs = row_refs(file_index, event_end, 2 * len(rows))
        for i, row in enumerate(rows):
            before = convert(table, row["before_values"])
            after = convert(table, row["after_values"])
            old_key, new_key = row_key(table, before), row_key(table, after)
            if old_key != new_key:
                out.append((old_key, to_record(table, before, refs[2 * i], env, deleted=True)))
                out.append((new_key, to_record(table, after, refs[2 * i + 1], env)))
                continue
            changed = [s.name for s in table.specs if before[s.name] != after[s.name]]
            if changed:
                out.append((new_key, to_record(table, after, refs[2 * i + 1], env, changed)))
    return out
