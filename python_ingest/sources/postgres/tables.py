"""Which table a name stands for, in stream order: the relation oid behind each tapped name.

pgoutput names a table in its Relation messages as it was when the change was made, and
identifies it by its relation oid, which a rename keeps and a DROP ... CREATE changes. The
tap keeps, per table name, the oid its lake rows come from (in its checkpoint, with the LSN
from which on: a bootstrap's snapshot point), and each Relation message is one of:

- ``FIRST``: a name not seen before: its oid is recorded;
- ``SAME``: the recorded oid;
- ``OLDER``: another oid, in a transaction before the recorded one's snapshot point: a table
  of that name dropped before the table's bootstrap; its changes are left out (the snapshot
  holds the table as it was after them);
- ``RECREATED``: another oid, never seen under another name: the table was dropped and
  created again. The old table's rows are deleted from the lake (as TRUNCATE), then the new
  table's rows flow, as a new schema version when its shape can be read into the old lake
  table; else the table stops saying why and what to do. Every row of the new table is in the
  stream only when the publication took it in at its CREATE (FOR ALL TABLES, or FOR TABLES IN
  SCHEMA its schema: ``joins_at_create``); a table added to a list later (sluice's own
  publication adds it when the tap starts) stops too, saying to bootstrap it;
- ``RENAMED``: an oid seen under another name: a table renamed to this name (a rename and
  swap): the name's old rows are deleted from the lake, and the table stops, since the rows the
  renamed table had are not in the stream: a bootstrap copies them.
"""

from __future__ import annotations

from typing import Any

from python_ingest.sources.postgres.pgoutput import Relation
from python_ingest.sources.postgres.position import lsn_text

FIRST, SAME, OLDER, RECREATED, RENAMED = "first", "same", "older", "recreated", "renamed"


def follow(oids: dict[str, dict[str, Any]], rel: Relation, lsn: int) -> tuple[str, str]:
    """(what the Relation is, a sentence saying what happened); records its oid in ``oids``
    (table → {"oid", "since", "was": the oids the name stood for before}) unless it is
    ``OLDER``."""
    qualified = rel.qualified
    entry = oids.get(qualified)
    if entry is not None and int(entry["oid"]) == rel.oid:
        return SAME, ""
    if entry is not None and lsn < int(entry.get("since", 0)):
        return OLDER, ""
    before = next((name for name, e in oids.items() if name != qualified and (
        int(e["oid"]) == rel.oid or rel.oid in e.get("was", ()))), None)
    was = [*(entry.get("was", ()) if entry else ()), *((int(entry["oid"]),) if entry else ())]
    oids[qualified] = {"oid": rel.oid, "since": 0, **({"was": was[-8:]} if was else {})}
    if before is not None:
        return RENAMED, (f"table {qualified} is now the table that was {before} (renamed: "
                         f"relation oid {rel.oid}, seen at {lsn_text(lsn)}); the rows of the "
                         f"former {qualified} are deleted from the lake")
    if entry is None:
        return FIRST, ""
    return RECREATED, (f"table {qualified} was dropped and created again (relation oid "
                       f"{entry['oid']} -> {rel.oid}, seen at {lsn_text(lsn)}): the old table's "
                       "rows are deleted from the lake, as by TRUNCATE")


def joins_at_create(conn: Any, publication: str, schema: str) -> bool:
    """Whether ``publication`` takes in a table of ``schema`` the moment it is created."""
    from python_ingest.sources.postgres import server

    found = server.rows(conn, "SELECT puballtables, current_setting('server_version_num')::int "
                              "FROM pg_publication WHERE pubname = %s", (publication,))
    if not found:
        return False
    if found[0][0]:
        return True
    return found[0][1] >= 150000 and bool(server.rows(
        conn, "SELECT 1 FROM pg_publication_namespace pn JOIN pg_publication p ON p.oid = "
              "pn.pnpubid JOIN pg_namespace n ON n.oid = pn.pnnspid WHERE p.pubname = %s "
              "AND n.nspname = %s", (publication, schema)))


def snapshot_entry(oid: int, point: int) -> dict[str, int]:
    """The entry a bootstrap records: its table's oid, from the snapshot point on."""
    return {"oid": oid, "since": point}
