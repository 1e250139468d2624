"""Tables joining sluice's own publication while the tap runs, each with a mark in the stream.

sluice's publication lists its tables (``FOR TABLE``): a table dropped and created again (a new
relation oid) or created later is outside it until someone adds it, and until then nothing of
it is streamed: its old rows stayed in the lake and its new rows were not published until the
tap restarted (#58.4). The tap now adds every included table missing from the publication as
it runs (server.py ``ensure_publication``, every second or so: ``add``), each in its own
transaction that also

- locks the table against writes for that moment (``SHARE``, waiting at most 2 s for the
  writers in flight), so whether it holds rows is exact: a row written before is not in the
  stream, one written after is;
- writes a transactional logical message (prefix ``sluice.published``: the relation oid, the
  name, whether it held rows) at that point of the WAL, which the tap reads in stream order,
  after every change made before it (the old table's last rows, its DROP): a table created
  again is then followed at once (tap_tables.py ``_published``): the old table's rows are
  deleted from the lake, and the new one flows when it was empty, or stops saying to
  bootstrap it when it held rows. The message needs pgoutput's ``messages`` option
  (PostgreSQL 14 and later); on 13 the table is added all the same and followed at its first
  change (tables.py: it stops for a bootstrap).

A publication the source names (``publication:``) is the DBA's: the tap never changes it.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from python_ingest.config import SourceConfig
from python_ingest.config.source_kinds import PostgresOptions

log = logging.getLogger(__name__)

PREFIX = "sluice.published"
_warned: set[tuple[str, str, str]] = set()


def add(conn: Any, source: SourceConfig, tables: list[tuple[str, str]]) -> list[str]:
    """Add ``tables`` (schema, table) to the source's own publication (server.py
    ``ensure_publication`` finds them), each with its mark (module doc); the tables added."""
    if source.of(PostgresOptions).publication is not None:
        return []
    added = []
    for schema, table in tables:
        name = '"{}"."{}"'.format(schema.replace('"', '""'), table.replace('"', '""'))
        try:
            with conn.cursor() as cur:
                cur.execute("BEGIN")
                cur.execute("SET LOCAL lock_timeout = '2s'")  # never stall the tap or writers
                cur.execute(f"LOCK TABLE {name} IN SHARE MODE")
                cur.execute(f'ALTER PUBLICATION "{source.of(PostgresOptions).publication_name}" '
                            f'ADD TABLE {name}')
                cur.execute(f"SELECT %s::regclass::oid, EXISTS (SELECT 1 FROM {name})",
                            (name,))
                oid, holds = cur.fetchone()
                cur.execute("SELECT pg_logical_emit_message(true, %s, %s)", (PREFIX, json.dumps(
                    {"oid": int(oid), "schema": schema, "table": table, "rows": bool(holds)})))
                cur.execute("COMMIT")
        except Exception as exc:  # psycopg2.Error: a lock not had in time, the table gone
            with conn.cursor() as cur:
                cur.execute("ROLLBACK")
            if (source.name, schema, table) not in _warned:  # once per process: it is
                _warned.add((source.name, schema, table))  # tried again every second
                log.warning("source %s: cannot add table %s.%s to the publication %s (%s): "
                            "its changes are not streamed until it is added (the tap tries "
                            "again; as the table's owner: ALTER PUBLICATION \"%s\" ADD TABLE "
                            "%s, then bootstrap it)", source.name, schema, table,
                            source.of(PostgresOptions).publication_name, str(exc).strip(),
                            source.of(PostgresOptions).publication_name, name)
            continue
        added.append(f"{schema}.{table}")
        log.info("source %s: added table %s.%s to the publication %s", source.name, schema,
                 table, source.of(PostgresOptions).publication_name)
    return added


def parse(content: bytes) -> dict[str, Any]:
    """A mark's content: {"oid", "schema", "table", "rows"}."""
    data = json.loads(content.decode("utf-8"))
    return {"oid": int(data["oid"]), "schema": str(data["schema"]),
            "table": str(data["table"]), "rows": bool(data["rows"])}
