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

PostgreSQL 13's pgoutput sends no logical messages (the option came in 14): there the guard
(``by_messages``) is a ``BEFORE TRUNCATE`` trigger that deletes the partition's rows itself
(``DELETE FROM ONLY``), so they reach the tap as the table's ordinary deletes, in order; a
TRUNCATE of such a partition (or of the whole table) then costs what a DELETE of its rows
does. (Before #58 the message trigger was put on there too, and every message was dropped.)

A partition created (or attached) later is guarded in its own transaction by an event trigger,
``sluice_guard_partitions`` (``guard_new_partitions``: on ``ddl_command_end`` of CREATE and
ALTER TABLE, it puts the trigger its siblings have on a new partition of a table whose
partitions are guarded), so a TRUNCATE of it is seen even when the tap reads its rows later.
Creating an event trigger takes a superuser: without one the tap logs the statements, and a
new partition gets its trigger only when the stream first describes it (its first change: a
TRUNCATE of it before that is not seen). What the tap cannot guard is never silent: a
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
ROWS_FUNCTION = f"{TRIGGER}_rows"  # PostgreSQL 13: the rows deleted before the TRUNCATE
_ROWS_FUNCTION = f"""CREATE OR REPLACE FUNCTION {{schema}}.{ROWS_FUNCTION}() RETURNS trigger
LANGUAGE plpgsql AS $body$
BEGIN
  EXECUTE format('DELETE FROM ONLY %I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME);
  RETURN NULL;
END $body$"""
MESSAGES_FROM = 140000  # pgoutput's 'messages' option (server_version_num)


def by_messages(server_version: int) -> bool:
    """Whether the server's pgoutput sends logical messages (PostgreSQL 14 and later): the
    guard writes one; before, pgoutput drops them, so the guard deletes the partition's rows
    itself before the TRUNCATE (module doc)."""
    return server_version >= MESSAGES_FROM


def trigger_sql(root_schema: str, partition: str, messages: bool = True) -> tuple[str, str]:
    """The statements that guard ``partition`` (quoted schema.table)."""
    schema = '"{}"'.format(root_schema.replace('"', '""'))
    if not messages:
        return (_ROWS_FUNCTION.format(schema=schema),
                f"CREATE TRIGGER {TRIGGER} BEFORE TRUNCATE ON {partition} FOR EACH STATEMENT "
                f"EXECUTE FUNCTION {schema}.{ROWS_FUNCTION}()")
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


def guard(conn: Any, source: SourceConfig, table: int | None = None,
          messages: bool | None = None) -> list[str]:
    """Put the trigger on every unguarded partition of the tapped partitioned tables (or of
    ``table``); the statements of those it may not (each logged as a WARNING). ``messages``:
    which guard (``by_messages``), by the server's version unless given."""
    left: list[str] = []
    if messages is None:
        messages = by_messages(conn.server_version)
    if table is None:
        left += guard_new_partitions(conn, source)
    for schema, partition in unguarded(conn, source, table):
        if (source.name, partition) in _refused:
            continue  # not the owner: said once per process, tried again at the next start
        statements = trigger_sql(schema, partition, messages)
        sql = ";\n".join(statements)
        try:
            _run(conn, statements)
        except Exception as exc:  # psycopg2.Error: no privilege, a lock timeout
            left.append(sql)
            if getattr(exc, "pgcode", None) == "42501":  # no privilege: say it once
                _refused.add((source.name, partition))
            log.warning("source %s: cannot put the trigger %s on partition %s (%s): a TRUNCATE "
                        "of that partition alone would not reach the lake (PostgreSQL does not "
                        "publish it). Run as its owner:\n%s;", source.name, TRIGGER, partition,
                        str(exc).strip(), sql)
    return left


def _run(conn: Any, statements: tuple[str, ...]) -> None:
    """``statements`` in one transaction, never waiting long for a lock (a stall of the tap)."""
    try:
        with conn.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("SET LOCAL lock_timeout = '2s'")
            for statement in statements:
                cur.execute(statement)
            cur.execute("COMMIT")
    except Exception:
        with conn.cursor() as cur:
            cur.execute("ROLLBACK")
        raise


EVENT_TRIGGER = "sluice_guard_partitions"
_GUARD_NEW = f"""CREATE OR REPLACE FUNCTION {{schema}}.{EVENT_TRIGGER}() RETURNS event_trigger
LANGUAGE plpgsql AS $body$
DECLARE
  made record;
  guard record;
BEGIN
  FOR made IN SELECT DISTINCT p.relid AS oid FROM pg_event_trigger_ddl_commands() d
      CROSS JOIN LATERAL pg_partition_tree(d.objid) p JOIN pg_class c ON c.oid = p.relid
      WHERE d.classid = 'pg_class'::regclass AND p.isleaf AND c.relkind = 'r'
        AND c.relispartition AND NOT EXISTS (SELECT 1 FROM pg_trigger t
          WHERE t.tgrelid = c.oid AND t.tgname = '{TRIGGER}') LOOP
    SELECT t.tgfoid::regprocedure::text AS function, (t.tgtype & 2) <> 0 AS before
      INTO guard FROM pg_partition_tree(pg_partition_root(made.oid)) p
      JOIN pg_trigger t ON t.tgrelid = p.relid AND t.tgname = '{TRIGGER}' LIMIT 1;
    IF FOUND THEN  -- a partition of a table whose partitions the tap guards
      BEGIN
        EXECUTE format('CREATE TRIGGER {TRIGGER} %s TRUNCATE ON %s FOR EACH STATEMENT '
                       'EXECUTE FUNCTION %s', CASE WHEN guard.before THEN 'BEFORE'
                       ELSE 'AFTER' END, made.oid::regclass, guard.function);
      EXCEPTION WHEN OTHERS THEN
        RAISE WARNING 'sluice: a TRUNCATE of partition % alone would not reach the lake: %',
          made.oid::regclass, SQLERRM;
      END;
    END IF;
  END LOOP;
EXCEPTION WHEN OTHERS THEN  -- never fail the DDL it follows
  RAISE WARNING 'sluice: new partitions not guarded: %', SQLERRM;
END $body$"""
_refused_event: set[str] = set()  # sources whose user may not create the event trigger


def guard_new_partitions(conn: Any, source: SourceConfig) -> list[str]:
    """An event trigger that guards a partition the moment it is created or attached (a
    TRUNCATE of it before the tap sees its first change would be lost otherwise), when a
    tapped table is partitioned; the statements when the tap's user may not (a superuser
    must: logged once as a WARNING)."""
    roots = [(s, t) for s, t in server.rows(
        conn, "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = "
              "c.relnamespace WHERE c.relkind = 'p' AND NOT c.relispartition ORDER BY 1, 2")
        if server.included(source, s, t)]
    if not roots or server.rows(conn, "SELECT 1 FROM pg_event_trigger WHERE evtname = %s",
                                (EVENT_TRIGGER,)):
        return []
    schema = '"{}"'.format(roots[0][0].replace('"', '""'))
    statements = (_GUARD_NEW.format(schema=schema),
                  f"CREATE EVENT TRIGGER {EVENT_TRIGGER} ON ddl_command_end WHEN TAG IN "
                  f"('CREATE TABLE', 'ALTER TABLE') EXECUTE FUNCTION {schema}.{EVENT_TRIGGER}()")
    try:
        _run(conn, statements)
    except Exception as exc:  # psycopg2.Error: not a superuser
        sql = ";\n".join(statements)
        if source.name not in _refused_event:
            _refused_event.add(source.name)
            log.warning("source %s: cannot create the event trigger %s (%s): a partition "
                        "created while the tap is behind is guarded only at its first change, "
                        "so a TRUNCATE of it before that would not reach the lake. Run as a "
                        "superuser:\n%s;", source.name, EVENT_TRIGGER, str(exc).strip(), sql)
        return [sql]
    return []


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
    """A delete (ref key ``ref``) of each of ``keys``, as truncation.truncate writes them."""
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
