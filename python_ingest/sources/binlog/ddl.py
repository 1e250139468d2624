"""Table DDL in the binlog that changes rows or names: TRUNCATE, DROP TABLE, RENAME TABLE
(issue #9.8), DROP DATABASE (issue #35.7), and CREATE TABLE, followed in stream order as
Debezium follows them (issue #50, tap_ddl.py, existence.py).

They come as query events, not row events, so the tap must act on them itself:

- **TRUNCATE** deletes every row. The tap publishes a delete for every row the table's topic
  says is live just before the TRUNCATE (the topic's events applied in ref-key order, as the
  merge does), all with the ref key of the TRUNCATE event's last byte: above every change before
  it, below every change after it (and below a snapshot taken right after it). The topic must
  still hold the table's whole history (no message removed by retention), else the table is
  stopped: the tap cannot name the rows to delete.
- **DROP TABLE** of a table that exists at that point of the stream deletes its rows in the lake
  as TRUNCATE does, and the table is gone; one created again under that name is published from
  its CREATE (every row it has is in the stream). A drop of a table the stream has already
  dropped (``DROP TABLE IF EXISTS`` of nothing) does nothing.
- **DROP DATABASE** (or its synonym DROP SCHEMA) drops its tables with it, in one statement
  that names none of them: it is a DROP TABLE of each of the database's tables the tap follows.
- **CREATE TABLE** marks the table as existing from there on; ``CREATE OR REPLACE TABLE`` is a
  DROP TABLE, then a CREATE TABLE.
- **RENAME TABLE a TO b** (or ``ALTER TABLE a RENAME TO b``) stops ``a``, whose changes now come
  under another name, and ``b``, whose lake table lacks the rows it had before (bootstrap it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

NAME = r"(?:`(?:[^`]|``)+`|[\w$]+)"
TABLE = rf"({NAME}(?:\s*\.\s*{NAME})?)"
COMMENT = re.compile(r"/\*.*?\*/|--[^\n]*|#[^\n]*", re.DOTALL)
_TRUNCATE = re.compile(rf"^TRUNCATE\s+(?:TABLE\s+)?{TABLE}\s*$", re.IGNORECASE)
_DROP = re.compile(r"^DROP\s+TABLES?\s+(?:IF\s+EXISTS\s+)?(.+?)(?:\s+(?:RESTRICT|CASCADE))?\s*$",
                   re.IGNORECASE | re.DOTALL)
_DROP_DATABASE = re.compile(rf"^DROP\s+(?:DATABASE|SCHEMA)\s+(?:IF\s+EXISTS\s+)?({NAME})\s*$",
                            re.IGNORECASE)
_RENAME = re.compile(r"^RENAME\s+TABLES?\s+(.+)$", re.IGNORECASE | re.DOTALL)
_ALTER_RENAME = re.compile(rf"^ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE\s+{TABLE}\s+RENAME\s+"
                           rf"(?:TO\s+|AS\s+)?{TABLE}\s*$", re.IGNORECASE)
_CREATE = re.compile(rf"^CREATE\s+(OR\s+REPLACE\s+)?(TEMPORARY\s+)?TABLE\s+"
                     rf"(?:IF\s+NOT\s+EXISTS\s+)?{TABLE}(?=[\s(]|$)", re.IGNORECASE)
_PAIR = re.compile(rf"^\s*{TABLE}\s+TO\s+{TABLE}\s*$", re.IGNORECASE)
_ONE = re.compile(rf"^\s*{TABLE}\s*$")

Table = tuple[str, str]


@dataclass(frozen=True)
class TableDdl:
    """One table statement: ``what`` is truncate, drop, create, rename (then ``to`` is set)
    or drop_database (``table`` is ``(db, "")``)."""

    what: str
    table: Table
    to: Table | None = None


def unquote(name: str) -> str:
    name = name.strip()
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def table_of(text: str, default_db: str) -> Table:
    parts = re.findall(NAME, text)
    return (unquote(parts[0]), unquote(parts[1])) if len(parts) == 2 else \
        (default_db, unquote(parts[0]))


def _split(text: str) -> list[str]:
    """Split a list of names at the commas outside back-quotes."""
    return [p for p in re.split(r",(?=(?:[^`]*`[^`]*`)*[^`]*$)", text) if p.strip()]


def parse(query: str, default_db: str) -> list[TableDdl]:
    """The table statements of one query event (empty for anything else)."""
    text = " ".join(COMMENT.sub(" ", query).split()).rstrip(";")
    if m := _DROP_DATABASE.match(text):
        return [TableDdl("drop_database", (unquote(m.group(1)), ""))]
    if m := _TRUNCATE.match(text):
        return [TableDdl("truncate", table_of(m.group(1), default_db))]
    if (m := _DROP.match(text)) and not text.upper().startswith("DROP TEMPORARY"):
        names = _split(m.group(1))
        if all(_ONE.match(n) for n in names):
            return [TableDdl("drop", table_of(n, default_db)) for n in names]
    if m := _CREATE.match(text):
        if m.group(2):  # a temporary table: never in a row-based binlog's row events
            return []
        table = table_of(m.group(3), default_db)
        return [TableDdl("drop", table), TableDdl("create", table)] if m.group(1) else \
            [TableDdl("create", table)]
    if m := _ALTER_RENAME.match(text):
        return [TableDdl("rename", table_of(m.group(1), default_db),
                         table_of(m.group(2), default_db))]
    if m := _RENAME.match(text):
        pairs = [_PAIR.match(p) for p in _split(m.group(1))]
        return [TableDdl("rename", table_of(p.group(1), default_db),
                         table_of(p.group(2), default_db)) for p in pairs if p is not None]
    return []


def stops(statement: TableDdl, end: Any, source: str) -> list[tuple[str, str, str, bool]]:
    """The tables a RENAME stops: (db, table, reason, only if the tap published it). Nothing
    else stops a table: a DROP deletes its rows in the lake instead (tap_ddl.py)."""
    if statement.what != "rename":
        return []
    restart = ("Its lake table is kept as it was. To publish the table again, bootstrap it "
               f"(`sluice bootstrap {source} <db.table>`, which clears this stop), or exclude it")
    db, name = statement.table
    assert statement.to is not None
    to = ".".join(statement.to)
    return [(db, name, f"renamed to {to} at {end} (RENAME TABLE): its changes come under that "
             f"name now. {restart}", True),
            (*statement.to, f"renamed from {db}.{name} at {end} (RENAME TABLE): its lake table "
             f"lacks the rows the table had before. {restart}", False)]
