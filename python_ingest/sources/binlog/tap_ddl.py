"""What the tap does with a DDL statement of a followed table (ddl.py parses them), in stream
order as Debezium follows it (issue #50, docs/binlog-tap.md):

- TRUNCATE publishes a delete per live row;
- DROP TABLE / DROP DATABASE of a table that may exist at that point of the stream publishes a
  delete per live row too (its lake table ends empty, as the source's table is gone) and clears
  a stop of the table; the table is absent from then on (existence.py), so a later
  ``DROP ... IF EXISTS`` of it does nothing, and a table created again under its name is
  published from its CREATE: every row it has is in the stream. It stops only when its new
  shape cannot be read into the old lake table (registry.py), with why and what to do;
- RENAME stops the tables it touches;
- a DML statement written as a statement (a session's binlog_format=STATEMENT/MIXED,
  statements.py) stops the tapped tables it writes, or the tap when they cannot be read from
  it; an unconditional ``DELETE FROM t`` is a TRUNCATE.

Functions of the running tap (tap.py ``Tap``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from python_ingest.exceptions import TapError
from python_ingest.sources.binlog import ddl, server, statements
from python_ingest.sources.binlog.position import BinlogPosition, pack_ref, ref_file_index
from python_ingest.sources.tap import truncation
from python_ingest.sources.tap.changes import Envelope
from python_ingest.sources.tap.registry import CHANGELOG, ROW, Registry, registered_key

if TYPE_CHECKING:
    from python_ingest.sources.binlog.tap_state import TapState

log = logging.getLogger(__name__)


def apply(tap: TapState, event: Any, end: BinlogPosition) -> None:
    """Act on the table statements of one query event (ddl.py), in stream order."""
    schema = event.schema.decode() if isinstance(event.schema, bytes) else str(event.schema)
    for statement in ddl.parse(event.query, schema):
        db, name = statement.table
        if statement.what == "truncate":
            truncate(tap, db, name, end, event.timestamp)
        elif statement.what == "drop":
            if tap.existence.exists(db, name) is not False:
                drop(tap, db, name, end, event.timestamp, f"DROP TABLE at {end}")
            tap.existence = tap.existence.dropped(db, name)
        elif statement.what == "drop_database":
            for table in sorted(followed(tap, db)):
                if tap.existence.exists(db, table) is not False:
                    drop(tap, db, table, end, event.timestamp, f"DROP DATABASE {db} at {end}")
            tap.existence = tap.existence.dropped_database(db)
        elif statement.what == "create":
            tap.existence = tap.existence.created(db, name)
        elif statement.what == "rename":
            for sdb, sname, reason, known_only in ddl.stops(statement, end, tap.source.name):
                stop(tap, sdb, sname, reason, known_only)
            assert statement.to is not None
            tap.existence = tap.existence.dropped(db, name).created(*statement.to)


def written_as_statement(tap: TapState, event: Any, end: BinlogPosition) -> None:
    """A query event holding row changes as a statement (statements.py): a TRUNCATE of an
    unconditional ``DELETE FROM t``; else a stop of each tapped table it writes, or of the
    whole tap (its checkpoint at the last one saved) when they cannot be read from it."""
    schema = event.schema.decode() if isinstance(event.schema, bytes) else str(event.schema)
    dml = statements.classify(event.query, schema)
    if dml is None:
        return
    if dml.tables is None:
        if statements.may_touch(tap.source, event.query, schema):
            raise TapError(
                f"source {tap.source.name}: the binlog holds, at {end}, a {dml.verb} statement "
                f"written as a statement whose tables the tap cannot read from it ("
                f"{' '.join(event.query.split())[:200]!r} in database {schema!r}; "
                "binlog_format=STATEMENT/MIXED in a session: SET SESSION binlog_format; the "
                "global ROW is what the tap checks), and the rows it changed are not in the "
                "binlog. The tap stops; its checkpoint stays at "
                f"{tap._where()}. Keep binlog_format=ROW in every session writing tapped "
                "tables, then start the tap from the binlog's current end and bootstrap the "
                "tables that statement may have written (docs/binlog-tap.md, "
                "\"Statement-format sessions\")")
        return
    for db, name in dml.tables:
        if dml.truncate:
            log.warning("source %s: %s at %s deletes every row of %s.%s (written as a "
                        "statement): published as a TRUNCATE", tap.source.name,
                        " ".join(event.query.split())[:200], end, db, name)
            truncate(tap, db, name, end, event.timestamp)
        else:
            stop(tap, db, name, statements.reason(dml, end, tap.source.name, f"{db}.{name}"),
                 known_only=False)


def followed(tap: TapState, db: str) -> set[str]:
    """The tables of ``db`` the tap has registered (a folder ``<db>.<table>`` each), tapped
    in this run, or stopped."""
    prefix = f"{db}."
    found = {name for d, name in tap.tables if d == db}
    found |= {q[len(prefix):] for q in tap.stopped if q.startswith(prefix)}
    if tap.registry_root.is_dir():
        found |= {p.name[len(prefix):] for p in tap.registry_root.iterdir()
                  if p.is_dir() and p.name.startswith(prefix) and len(p.name) > len(prefix)}
    return found


def stop(tap: TapState, db: str, name: str, reason: str, known_only: bool = True) -> None:
    qualified = f"{db}.{name}"
    if not server.included(tap.source, db, name) or qualified in tap.stopped or (
            known_only and Registry(tap.registry_root / qualified).latest() is None):
        return  # not tapped, stopped already, or never published: nothing to keep apart
    tap._stop_table(db, name, reason)


def drop(tap: TapState, db: str, name: str, end: BinlogPosition, timestamp: int, what: str) -> None:
    """A DROP of a table that may exist here: a delete for every row its topic holds live
    (as TRUNCATE), so its lake table ends empty like the source; a stop of the table is
    cleared, as every row of a table created again under its name is in the stream."""
    qualified = f"{db}.{name}"
    if not server.included(tap.source, db, name):
        return
    was = tap.stopped.pop(qualified, None)
    if delete_live(tap, db, name, end, timestamp, what) and was is not None:
        log.warning("source %s: %s dropped %s, stopped before (%s): its lake rows are "
                    "deleted and a table created again under its name is published from its "
                    "CREATE", tap.source.name, what, qualified, was["error"])


def truncate(tap: TapState, db: str, name: str, end: BinlogPosition, timestamp: int) -> None:
    """A delete for every row the table's topic holds live, with the ref key of the
    TRUNCATE event's last byte (tap/truncation.py)."""
    qualified = f"{db}.{name}"
    if not server.included(tap.source, db, name) or qualified in tap.stopped:
        return  # not tapped, or stopped: the lake keeps it as it was
    delete_live(tap, db, name, end, timestamp, f"TRUNCATE at {end}")


def delete_live(tap: TapState, db: str, name: str, end: BinlogPosition, timestamp: int,
                what: str) -> bool:
    """Publish a delete for every row the table's topic holds live below the statement's
    last byte (``end`` - 1); False when it could not, and stopped the table instead."""
    qualified = f"{db}.{name}"
    registry = Registry(tap.registry_root / qualified)
    latest = registry.latest()
    if latest is None:
        return True  # never published: the lake holds none of its rows
    kind = registered_key(latest[1]).kind
    if kind == CHANGELOG or (kind == ROW and tap.rows.skip(qualified, end)):
        return True  # an append-only changelog keeps every change; or in a bootstrap snapshot
    assert tap.producer is not None
    published = truncation.truncate(tap.producer, tap.settings.broker.bootstrap_servers,
                             f"{tap.source.topic_base}.{db}.{name}", registry.versions(),
                             pack_ref(ref_file_index(end.file_index, tap._generation),
                                      end.pos - 1),
                             Envelope(tap.source.kind, timestamp * 1000,
                                      tap.source.data_center))
    if isinstance(published, str):
        tap._stop_table(db, name, f"{what}: {published}")
        return False
    tap.stats.messages += published
    if kind == ROW:
        tap.rows.clear(qualified)
    log.info("source %s: %s: %s: published %d deletes", tap.source.name, what, qualified,
             published)
    return True
