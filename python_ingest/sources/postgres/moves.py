"""Key changes whose update left TOASTed values out (REPLICA IDENTITY DEFAULT or USING INDEX).

An update that changes a row's key is published as a delete of the old key and an insert of
the new one (events.py). The insert must be a full image: the lake has no row under the new
key whose values a partial update could keep. pgoutput leaves a TOASTed value the update did
not change out of the new tuple (``UNCHANGED``), and the old tuple carries only the key (FULL
carries the whole old row, and needs none of this). A value the change carries is taken from
it: a TOASTed key column the update left alone is in the old key (#58: it was read from the
table, so the key change's version could hold a later transaction's value). The others are
read from the table now, by the new key, through the relation's oid (its name may have changed
since):

- the row is there: its values now. A later change of the row is in the stream after this one
  (higher ref keys), so the lake ends with the row's last values either way; but the key
  change's own version (Hudi's or Iceberg's history, the raw table) may show a value a later
  transaction wrote: the server's WAL does not hold the unchanged value at that point, and
  PostgreSQL keeps no older version to read;
- the row is gone now (deleted, or its key changed again, or the table dropped): a change
  after this one in the stream removes it, so the lake must end without it. Only the old key's
  delete is published, and the new key is *gone*: until the stream deletes or inserts that
  key (or a TRUNCATE of the table removes every key), a partial update of it (which the lake
  could not apply: no row to keep values from) is dropped, and a full image of it is
  published as usual. The table's fast path (which skips
  this bookkeeping) is off while it has gone keys.

Before (#50.4) the insert went out partial and the merge wrote an error row for each such key
change that nobody could resolve. Gone keys are part of the tap's checkpoint (``gone``), so a
tap restarted between such a key change and the row's later partial update still drops it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from python_ingest.sources.postgres import server
from python_ingest.sources.postgres.pgoutput import UNCHANGED, Relation


class RowReader:
    """Reads the values a key change left out, by the relation's oid and its key columns."""

    def __init__(self, connect: Callable[[], Any]) -> None:
        self._connect = connect
        self._conn: Any = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def fill(self, rel: Relation, new: list[Any], old: list[Any] | None = None
             ) -> list[Any] | None:
        """``new`` with its UNCHANGED values: from the change itself where its old key
        carries them (a TOASTed key column the update left alone is in ``old``, not in
        ``new``), the others as the table holds them now; None when those are needed and the
        row (or its table) is gone."""
        before = old or [None] * len(new)
        new = [o if v is UNCHANGED and o is not None and o is not UNCHANGED else v
               for v, o in zip(new, before, strict=True)]
        if UNCHANGED not in new:
            return new  # the change carries every value: exact, nothing read
        if self._conn is None:
            self._conn = self._connect()
            server.raw_text(self._conn)
        named = server.rows(self._conn, "SELECT n.nspname, c.relname FROM pg_class c JOIN "
                                        "pg_namespace n ON n.oid = c.relnamespace "
                                        "WHERE c.oid = %s", (rel.oid,))
        if not named:
            return None  # dropped since
        keys = [(c.name, v) for c, v in zip(rel.columns, new, strict=True) if c.is_key]
        if not keys or any(v is None or v is UNCHANGED for _n, v in keys):
            return None
        wanted = [i for i, v in enumerate(new) if v is UNCHANGED]
        listed = ", ".join(_name(rel.columns[i].name) for i in wanted)
        where = " AND ".join(f"{_name(name)} = %s" for name, _v in keys)
        found = server.rows(self._conn, f"SELECT {listed} FROM "
                                        f"{server.quoted(named[0][0], named[0][1])} "
                                        f"WHERE {where}", [v for _n, v in keys])
        if not found:
            return None
        filled = list(new)
        for i, value in zip(wanted, found[0], strict=True):
            filled[i] = value
        return filled


def _name(column: str) -> str:
    return '"{}"'.format(column.replace('"', '""'))
