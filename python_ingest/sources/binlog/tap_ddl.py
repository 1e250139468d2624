"""What the tap does with a DDL statement of a followed table (ddl.py parses them): TRUNCATE
publishes a delete per live row, DROP TABLE, DROP DATABASE and RENAME stop the tables they
touch (docs/binlog-tap.md). Functions of the running tap (tap.py ``Tap``)."""

from __future__ import annotations

import logging
from typing import Any

from python_ingest.sources.binlog import ddl, server
from python_ingest.sources.binlog.events import Envelope
from python_ingest.sources.binlog.position import BinlogPosition, pack_ref, ref_file_index
from python_ingest.sources.binlog.registry import CHANGELOG, ROW, Registry, registered_key

log = logging.getLogger(__name__)


def apply(tap: Any, event: Any, end: BinlogPosition) -> None:
    """TRUNCATE publishes a delete per live row; DROP (TABLE or DATABASE) and RENAME stop
    tables (ddl.py)."""
    schema = event.schema.decode() if isinstance(event.schema, bytes) else str(event.schema)
    for statement in ddl.parse(event.query, schema):
        if statement.what == "truncate":
            truncate(tap, *statement.table, end, event.timestamp)
        tables = (followed(tap, statement.table[0]) if statement.what == "drop_database"
                  else ())
        for db, name, reason, known_only in ddl.stops(statement, end, tap.source.name,
                                                      tables):
            stop(tap, db, name, reason, known_only)

def followed(tap: Any, db: str) -> set[str]:
    """The tables of ``db`` the tap has registered (a folder ``<db>.<table>`` each)."""
    prefix = f"{db}."
    found = {name for d, name in tap.tables if d == db}
    if tap.registry_root.is_dir():
        found |= {p.name[len(prefix):] for p in tap.registry_root.iterdir()
                  if p.is_dir() and p.name.startswith(prefix) and len(p.name) > len(prefix)}
    return found

def stop(tap: Any, db: str, name: str, reason: str, known_only: bool = True) -> None:
    qualified = f"{db}.{name}"
    if not server.included(tap.source, db, name) or qualified in tap.stopped or (
            known_only and Registry(tap.registry_root / qualified).latest() is None):
        return  # not tapped, stopped already, or never published: nothing to keep apart
    tap._stop_table(db, name, reason)

def truncate(tap: Any, db: str, name: str, end: BinlogPosition, timestamp: int) -> None:
    """A delete for every row the table's topic holds live, with the ref key of the
    TRUNCATE event's last byte (ddl.py)."""
    qualified = f"{db}.{name}"
    registry = Registry(tap.registry_root / qualified)
    latest = registry.latest()
    if not server.included(tap.source, db, name) or qualified in tap.stopped or \
            latest is None:
        return  # not tapped, stopped, or never published: the lake holds none of its rows
    kind = registered_key(latest[1]).kind
    if kind == CHANGELOG or (kind == ROW and tap.rows.skip(qualified, end)):
        return  # an append-only changelog keeps every change; or in a bootstrap snapshot
    assert tap.producer is not None
    published = ddl.truncate(tap.producer, tap.settings.broker.bootstrap_servers,
                             f"{tap.source.topic_base}.{db}.{name}", registry.versions(),
                             pack_ref(ref_file_index(end.file_index, tap._generation),
                                      end.pos - 1),
                             Envelope(tap.source.kind, timestamp * 1000,
                                      tap.source.data_center))
    if isinstance(published, str):
        tap._stop_table(db, name, f"TRUNCATE at {end}: {published}")
        return
    tap.stats.messages += published
    if kind == ROW:
        tap.rows.clear(qualified)
    log.info("source %s: TRUNCATE %s at %s: published %d deletes", tap.source.name,
             qualified, end, published)
