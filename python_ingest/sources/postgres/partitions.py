"""TRUNCATE of one partition of a partitioned table, which pgoutput does not publish.

sluice's publication sends a partitioned table's changes under the table's own name
(``publish_via_partition_root = true``: one topic, one lake table). pgoutput then leaves out a
TRUNCATE of a single partition (it publishes a TRUNCATE of the whole table only), so the lake
would keep the partition's rows for good. The tap therefore puts a statement trigger
``sluice_truncate_partition`` on every partition of a tapped partitioned table (when it starts:
``guard``); it writes a transactional logical message into the WAL, in the transaction's
order, naming the partition, its partitioned table and the partition's constraint as it is at
that moment. The tap asks for those messages (pgoutput's ``messages`` option, PostgreSQL 14
and later) and, for each one not part of a TRUNCATE of the whole table, publishes a delete of
every live row of the table's topic that the constraint holds for (``members``: the server
evaluates it over the rows' partition key values), with the message's ref key.

A partition created while the tap runs gets the trigger when the stream next describes its
table (a Relation message: the table's first change after the CREATE, ``guard`` of that
table); a TRUNCATE of it before that is not seen. What the tap cannot guard is never silent: a
partition it may not put the trigger on (the tap's user does not own it) is named in a
WARNING with the statements to run; a message whose rows cannot be worked out stops the
table, saying why and what to do.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from python_ingest.config import SourceConfig
from python_ingest.sources.postgres import server
from python_ingest.sources.tap.changes import Envelope
from python_ingest.sources.tap.producer import Encoder
from python_ingest.sources.tap.registry import TableShape

log = logging.getLogger(__name__)

PREFIX = "sluice.truncate_partition"
_refused: set[tuple[str, str]] = set()  # (source, partition) the tap may not guard
TRIGGER = "sluice_truncate_partition"
_FUNCTION = f"""CREATE OR REPLACE FUNCTION {{schema}}.{TRIGGER}() RETURNS trigger
LANGUAGE plpgsql AS $body$
BEGIN
  PERFORM pg_logical_emit_message(true, '{PREFIX}', json_build_object(
    'partition', TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME,
    'root', pg_partition_root(TG_RELID)::oid::bigint,
    'constraint', pg_get_partition_constraintdef(TG_RELID))::text);
  RETURN NULL;
END $body$"""


def trigger_sql(root_schema: str, partition: str) -> tuple[str, str]:
    """The statements that guard ``partition`` (quoted schema.table)."""
    schema = '"{}"'.format(root_schema.replace('"', '""'))
    return (_FUNCTION.format(schema=schema),
            f"CREATE TRIGGER {TRIGGER} AFTER TRUNCATE ON {partition} FOR EACH STATEMENT "
            f"EXECUTE FUNCTION {schema}.{TRIGGER}()")


def unguarded(conn: Any, source: SourceConfig, table: int | None = None
              ) -> list[tuple[str, str]]:
    """(root schema, quoted partition) of every partition of a tapped partitioned table (or
    of the table ``table``, a relation oid) that has no ``sluice_truncate_partition``
    trigger."""
    found = server.rows(
        conn, "SELECT n.nspname, c.relname, pn.nspname, p.relname FROM pg_class c "
              "JOIN pg_namespace n ON n.oid = c.relnamespace "
              "CROSS JOIN LATERAL pg_partition_tree(c.oid) t "
              "JOIN pg_class p ON p.oid = t.relid JOIN pg_namespace pn ON pn.oid = "
              "p.relnamespace WHERE c.relkind = 'p' AND NOT c.relispartition "
              "AND (c.oid = %s OR %s IS NULL) "
              "AND t.relid <> c.oid AND p.relkind = 'r' AND NOT EXISTS (SELECT 1 FROM "
              "pg_trigger g WHERE g.tgrelid = p.oid AND g.tgname = %s) ORDER BY 3, 4",
        (table, table, TRIGGER))
    return [(schema, server.quoted(ps, pt)) for schema, table, ps, pt in found
            if server.included(source, schema, table)]


def guard(conn: Any, source: SourceConfig, table: int | None = None) -> list[str]:
    """Put the trigger on every unguarded partition of the tapped partitioned tables (or of
    ``table``); the statements of those it may not (each logged as a WARNING)."""
    left: list[str] = []
    for schema, partition in unguarded(conn, source, table):
        if (source.name, partition) in _refused:
            continue  # not the owner: said once per process, tried again at the next start
        statements = trigger_sql(schema, partition)
        sql = ";\n".join(statements)
        try:
            with conn.cursor() as cur:
                cur.execute("BEGIN")
                cur.execute("SET LOCAL lock_timeout = '2s'")  # never stall the tap behind a lock
                for statement in statements:
                    cur.execute(statement)
                cur.execute("COMMIT")
        except Exception as exc:  # psycopg2.Error: no privilege, a lock timeout
            with conn.cursor() as cur:
                cur.execute("ROLLBACK")
            left.append(sql)
            if getattr(exc, "pgcode", None) == "42501":  # no privilege: say it once
                _refused.add((source.name, partition))
            log.warning("source %s: cannot put the trigger %s on partition %s (%s): a TRUNCATE "
                        "of that partition alone would not reach the lake (PostgreSQL does not "
                        "publish it). Run as its owner:\n%s;", source.name, TRIGGER, partition,
                        str(exc).strip(), sql)
    return left


def parse(content: bytes) -> dict[str, Any]:
    """A trigger's message: {"partition", "root" (oid), "constraint"}."""
    data = json.loads(content.decode("utf-8"))
    return {"partition": str(data["partition"]), "root": int(data["root"]),
            "constraint": data.get("constraint")}


def members(conn: Any, shape: TableShape, root: int, rows: dict[bytes, dict[str, Any]],
            constraint: str) -> list[bytes]:
    """The keys of ``rows`` (decoded topic records) for which the partition's ``constraint``
    holds, evaluated by the server over the rows' values cast to the columns' types (those
    of the partitioned table, relation oid ``root``)."""
    if not rows:
        return []
    types = dict(server.rows(
        conn, "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE "
              "attrelid = %s AND attnum > 0 AND NOT attisdropped", (root,)))
    names = [c.name for c in shape.columns if c.name in types]
    keys = list(rows)
    arrays = [[_text(rows[k].get(n)) for k in keys] for n in names]
    quoted = ['"{}"'.format(n.replace('"', '""')) for n in names]
    columns = ", ".join(f"u.c{i}::{types[n]} AS {q}"
                        for i, (n, q) in enumerate(zip(names, quoted, strict=True)))
    unnest = ", ".join(["%s::int[]"] + ["%s::text[]"] * len(names))
    aliases = ", ".join(["i"] + [f"c{i}" for i in range(len(names))])
    found = server.rows(conn, f"SELECT t.i FROM (SELECT u.i, {columns} FROM unnest({unnest}) "
                              f"AS u({aliases})) AS t WHERE {constraint}",
                        [list(range(len(keys))), *arrays])
    return [keys[int(r[0])] for r in found]


def publish_deletes(producer: Any, topic: str, versions: dict[int, dict[str, Any]],
                    live: dict[bytes, dict[str, Any]], keys: list[bytes], ref: int,
                    env: Envelope) -> int:
    """A delete (ref key ``ref``) of each of ``keys``, as ddl.truncate writes them."""
    sid = max(versions)
    encoder = Encoder(sid, versions[sid])
    fields = [f["name"] for f in versions[sid]["fields"]]
    for key in keys:
        event = {f: live[key].get(f) for f in fields}  # the row as it was
        event.update(_ref_key=ref, _changed_columns=None, _source=env.source,
                     _event_ts=env.event_ts_ms, _is_deleted=True, _force_update=False,
                     _data_center=env.data_center)
        producer.send(topic, key, encoder.encode(event))
    return len(keys)


def _text(value: Any) -> str | None:
    """A decoded Avro value as PostgreSQL reads it back (dates, timestamps, decimals, numbers,
    text); None stays NULL."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    return str(value)
