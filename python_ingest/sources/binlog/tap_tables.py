"""A tapped table's publishing state, from the columns of its row events: its registered
schema version (registry.py), its key (keys.py) and its topic. A table is registered again
only when its columns change (a new version when columns were added or widened); a table whose
columns cannot be published stops (``Tap._stop_table``). Functions of the running tap (tap.py
``Tap``); registering and making the topic are the tap core's (tap/core.py)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from python_ingest.exceptions import IncompatibleSchemaChange, SluiceError, UnsupportedColumn
from python_ingest.sources.binlog import server
from python_ingest.sources.binlog.columns import from_binlog
from python_ingest.sources.binlog.events import TappedTable
from python_ingest.sources.tap import keys
from python_ingest.sources.tap.core import topic_for
from python_ingest.sources.tap.producer import Encoder
from python_ingest.sources.tap.registry import (
    PRIMARY,
    ROW,
    UNIQUE,
    Registry,
    TableShape,
    registered_key,
)

if TYPE_CHECKING:
    from python_ingest.sources.binlog.tap_state import TapState

log = logging.getLogger(__name__)


def tapped(tap: TapState, event: Any, db: str, name: str) -> TappedTable | None:
    """The table's publishing state for this event's columns (new version if added)."""
    key = (db, name)
    table_obj = event.table_map[event.table_id]
    if tap._table_objs.get(key) is table_obj:
        return tap.tables[key]
    columns = event.columns
    signature = tuple((c.name, c.type, c.unsigned, getattr(c, "collation_id", None),
                       getattr(c, "nullable", None), getattr(c, "max_length", None),
                       getattr(c, "bits", None), getattr(c, "precision", None),
                       getattr(c, "decimals", None), getattr(c, "fsp", None),
                       tuple(c.enum_values or ()), tuple(c.set_values or ()), c.is_primary)
                      for c in columns)
    if tap._signatures.get(key) == signature:
        tap._table_objs[key] = table_obj
        return tap.tables[key]
    try:
        found = register(tap, db, name, columns)
    except (IncompatibleSchemaChange, UnsupportedColumn, SluiceError) as exc:
        tap._stop_table(db, name, str(exc))
        return None
    tap.tables[key] = found
    tap._signatures[key] = signature
    tap._table_objs[key] = table_obj
    return found


def register(tap: TapState, db: str, name: str, columns: list[Any]) -> TappedTable:
    """Register the table's shape for these columns (its key decided), its topic made."""
    types = server.data_types(tap._conn, db, name)
    specs = tuple(from_binlog(c, tap._charsets, types.get(c.name)) for c in columns)
    key_set = {c.name for c in columns if c.is_primary}
    registry = Registry(tap.registry_root / f"{db}.{name}")
    latest = registry.latest()
    order: tuple[str, ...] = ()
    uniques: list[tuple[str, tuple[str, ...]]] = []
    if key_set:  # the primary key, or the UNIQUE index the server promoted to it
        known = registered_key(latest[1]) if latest else None
        if known is not None and known.kind in (PRIMARY, UNIQUE) and \
                set(known.columns) == key_set:
            if known.kind == PRIMARY:
                order = known.columns
            else:
                uniques = [(known.index or "?", known.columns)]
        else:
            order = server.primary_key(tap._conn, db, name)
            if not order:
                uniques = [u for u in server.unique_keys(tap._conn, db, name)
                           if set(u[1]) == key_set][:1]
            if set(order) != key_set and not uniques:  # changed again since: binlog order
                order = tuple(c.name for c in columns if c.is_primary)
    else:
        uniques = server.unique_keys(tap._conn, db, name)
    key = keys.decide(tap.source, f"{db}.{name}", specs, order, uniques,
                      latest[1] if latest else None)
    shape = TableShape(db, name, specs, key)
    schema_id = tap._register_shape(registry, latest[0] if latest else None, shape)
    topic = topic_for(tap.source, db, name)
    assert tap._charsets is not None
    return TappedTable(shape, schema_id, Encoder(schema_id, shape.avro()), topic,
                       tap._charsets.decode, tap.rows if key.kind == ROW else None)
