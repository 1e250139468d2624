"""Talking to the PostgreSQL server: connections, the checks the tap needs, the publication
and the replication slot, and what the catalog says about a table.

Every connection (the replication one included: a walsender runs the types' output functions
under its session's settings) gets ``SESSION``, so values arrive in one known text form that
columns.py converts: ISO dates, ISO 8601 intervals, UTC, shortest exact floats, hex bytea,
money in the C locale.
"""

from __future__ import annotations

import fnmatch
from typing import Any

from python_ingest.config import SourceConfig
from python_ingest.config.source_kinds import PostgresOptions
from python_ingest.exceptions import TapError
from python_ingest.sources.postgres import publication
from python_ingest.sources.postgres.columns import PgType
from python_ingest.sources.postgres.position import parse_lsn

SYSTEM_SCHEMAS = ("pg_catalog", "information_schema", "pg_toast")
SESSION = ("-c DateStyle=ISO,YMD -c IntervalStyle=iso_8601 -c TimeZone=UTC "
           "-c extra_float_digits=3 -c bytea_output=hex -c lc_monetary=C")
PUBLISHED = "insert, update, delete, truncate"


def _dsn(source: SourceConfig) -> dict[str, Any]:
    """Every connection's parameters: the source's TLS settings (managed servers require
    them), and UTF-8 as the client encoding whatever the database's (LATIN1 ...): the server
    converts the text it sends, and pgoutput.py and the converters read UTF-8."""
    dsn = {"host": source.host, "port": source.port, "user": source.user,
           "dbname": source.of(PostgresOptions).database, "options": SESSION, "connect_timeout": 10,
           "application_name": f"sluice tap {source.name}", "client_encoding": "UTF8"}
    for name in ("sslmode", "sslrootcert", "sslcert", "sslkey"):
        if getattr(source, name) is not None:
            dsn[name] = getattr(source, name)
    return dsn


def _password(source: SourceConfig) -> dict[str, Any]:
    if source.password is None and source.password_env is None and source.password_file is None:
        return {}
    return {"password": source.secret()}


def connect(source: SourceConfig) -> Any:
    """An ordinary connection (autocommit) to the source's database."""
    import psycopg2

    try:
        conn = psycopg2.connect(**_dsn(source), **_password(source))
    except psycopg2.OperationalError as exc:
        raise TapError(f"source {source.name}: cannot connect to PostgreSQL at "
                       f"{source.host}:{source.port} database "
                       f"{source.of(PostgresOptions).database} as "
                       f"{source.user}: {str(exc).strip()}") from exc
    conn.autocommit = True
    return conn


def replication_connect(source: SourceConfig) -> Any:
    """A logical replication connection (psycopg2's LogicalReplicationConnection)."""
    import psycopg2
    from psycopg2.extras import LogicalReplicationConnection

    try:
        return psycopg2.connect(**_dsn(source), **_password(source),
                                connection_factory=LogicalReplicationConnection)
    except psycopg2.OperationalError as exc:
        text = str(exc).strip()
        hint = ""
        if "replication" in text and ("pg_hba" in text or "permission" in text
                                      or "must be" in text):
            hint = (f". The user needs the REPLICATION attribute (ALTER ROLE {source.user} "
                    "REPLICATION) and a pg_hba.conf line allowing it (docs/postgres-source.md)")
        raise TapError(f"source {source.name}: cannot open a replication connection to "
                       f"{source.host}:{source.port} as {source.user}: {text}{hint}") from exc


def raw_text(conn: Any) -> None:
    """Make ``conn`` hand over every value as the server's text (its output function's, as
    pgoutput sends it) instead of psycopg2's Python values."""
    import psycopg2.extensions as ext

    oids = tuple(int(r[0]) for r in rows(conn, "SELECT oid FROM pg_type"))
    ext.register_type(ext.new_type(oids, "SLUICE_TEXT", lambda value, _cur: value), conn)


def rows(conn: Any, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(sql, params)
        return list(cur.fetchall())


def check_server(conn: Any, source: SourceConfig) -> None:
    """Raise TapError, saying what to change, unless the server can feed the tap."""
    level = rows(conn, "SHOW wal_level")[0][0]
    if level != "logical":
        raise TapError(f"source {source.name}: the server's wal_level is '{level}', logical "
                       "replication needs 'logical': set wal_level = logical in "
                       "postgresql.conf (ALTER SYSTEM SET wal_level = logical) and restart the "
                       "server (docs/postgres-source.md)")
    # Amazon RDS and Aurora grant replication by membership in their rds_replication role
    allowed = rows(conn, "SELECT u.rolreplication OR u.rolsuper OR EXISTS (SELECT 1 FROM "
                         "pg_roles r WHERE r.rolname = 'rds_replication' AND "
                         "pg_has_role(u.oid, r.oid, 'MEMBER')) FROM pg_roles u "
                         "WHERE u.rolname = current_user")
    if not allowed or not allowed[0][0]:
        raise TapError(f"source {source.name}: the user {source.user} lacks the REPLICATION "
                       f"attribute: run ALTER ROLE {source.user} REPLICATION as a superuser "
                       f"(on Amazon RDS or Aurora: GRANT rds_replication TO {source.user}) "
                       "(docs/postgres-source.md)")
    encoding = rows(conn, "SELECT pg_encoding_to_char(encoding) FROM pg_database "
                          "WHERE datname = current_database()")[0][0]
    if encoding == "SQL_ASCII":
        raise TapError(
            f"source {source.name}: database {source.of(PostgresOptions).database} has the "
            "encoding SQL_ASCII: "
            "the server neither checks nor converts its text, so a value that is not UTF-8 "
            "cannot be published (it would stop the tap at every start). Move the data into a "
            "UTF8 database (createdb -E UTF8 -T template0 NEW, then pg_dump -E <the bytes' real "
            "encoding, e.g. LATIN1> OLD | psql NEW: the server converts them to UTF-8) and "
            "point the source at it (docs/postgres-source.md, \"Setting the server up\")")


def included(source: SourceConfig, schema: str, table: str) -> bool:
    name = f"{schema}.{table}"
    if schema in SYSTEM_SCHEMAS:
        return False
    return any(fnmatch.fnmatchcase(name, p) for p in source.include) and not any(
        fnmatch.fnmatchcase(name, p) for p in source.exclude)


def tables(conn: Any, source: SourceConfig) -> list[tuple[str, str]]:
    """The source's tables (schema, table), ordinary and partitioned, in name order."""
    found = rows(conn, "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n "
                       "ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'p') "
                       "AND NOT c.relispartition ORDER BY 1, 2")
    return [(s, t) for s, t in found if included(source, s, t)]


def quoted(schema: str, table: str) -> str:
    return '"{}"."{}"'.format(schema.replace('"', '""'), table.replace('"', '""'))


def ensure_publication(conn: Any, source: SourceConfig) -> bool:
    """Create the source's publication of its tables when missing (True when created); a
    publication sluice created gains the tables included since."""
    name = source.of(PostgresOptions).publication_name
    found = rows(conn, "SELECT pubowner::regrole::text FROM pg_publication WHERE pubname = %s",
                 (name,))
    listed = ", ".join(quoted(s, t) for s, t in tables(conn, source))
    if not found:
        if not listed:
            raise TapError(f"source {source.name}: no table of database "
                           f"{source.of(PostgresOptions).database} "
                           f"matches include {list(source.include)}")
        conn.cursor().execute(f'CREATE PUBLICATION "{name}" FOR TABLE {listed} '
                              f"WITH (publish = '{PUBLISHED}', "
                              "publish_via_partition_root = true)")  # a partitioned table's
        # changes come under its own name (its topic), not its partitions'.
        return True
    if source.of(PostgresOptions).publication is None:  # ours: add the tables included
        # since, each with its mark (publication.py)
        published = set(rows(conn, "SELECT schemaname, tablename FROM pg_publication_tables "
                                   "WHERE pubname = %s", (name,)))
        publication.add(conn, source, [t for t in tables(conn, source) if t not in published])
    return False


def slot_info(conn: Any, slot: str) -> dict[str, Any] | None:
    """The slot's plugin, database, confirmed flush LSN and retained WAL, or None."""
    found = rows(conn, "SELECT plugin, database, confirmed_flush_lsn::text, restart_lsn::text, "
                       "pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint, active, "
                       "wal_status FROM pg_replication_slots WHERE slot_name = %s", (slot,))
    if not found:
        return None
    plugin, database, confirmed, restart, retained, active, status = found[0]
    return {"plugin": plugin, "database": database,
            "confirmed_flush": parse_lsn(confirmed) if confirmed else None,
            "restart": parse_lsn(restart) if restart else None,
            "retained_bytes": int(retained or 0), "active": bool(active),
            "wal_status": status}


def wait_inactive(conn: Any, source: SourceConfig, timeout_s: float = 15.0) -> None:
    """Wait until no connection streams from the source's slot (the server ends the walsender
    of a tap that just died a moment later); TapError when one still does."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        found = rows(conn, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s "
                           "AND active", (source.of(PostgresOptions).slot_name,))
        if not found:
            return
        if time.monotonic() > deadline:
            raise TapError(f"source {source.name}: the slot "
                           f"{source.of(PostgresOptions).slot_name} is in use by "
                           f"server process {found[0][0]}: another tap of it runs (on another "
                           "host?); run one per source")
        time.sleep(0.1)


def create_slot(repl: Any, slot: str, export: bool = False, temporary: bool = False
                ) -> tuple[int, str | None]:
    """Create a logical slot for pgoutput on the replication connection ``repl``: its
    consistent point and, with ``export``, the exported snapshot's name (valid while ``repl``
    stays open and runs nothing else)."""
    cur = repl.cursor()
    cur.execute(f'CREATE_REPLICATION_SLOT "{slot}" {"TEMPORARY " if temporary else ""}'
                f'LOGICAL pgoutput {"EXPORT_SNAPSHOT" if export else "NOEXPORT_SNAPSHOT"}')
    _name, point, snapshot, _plugin = cur.fetchone()
    return parse_lsn(point), snapshot


def keepalive_interval(conn: Any, heartbeat_s: float) -> float:
    """How often the tap sends the server a status update while busy (wire.py): every
    ``heartbeat_s``, and at least four times per wal_sender_timeout (the server ends a
    replication connection silent that long; the setting may be per database or role, so it is
    read on a connection of the tap's user and database)."""
    found = rows(conn, "SELECT setting::int FROM pg_settings WHERE name = 'wal_sender_timeout'")
    timeout_ms = int(found[0][0]) if found else 0
    return min(heartbeat_s, timeout_ms / 4000) if timeout_ms > 0 else heartbeat_s


def current_lsn(conn: Any) -> int:
    """The end of the WAL inserted so far: every transaction committed lies before it (the
    write position may lag behind an asynchronous commit)."""
    return parse_lsn(rows(conn, "SELECT pg_current_wal_insert_lsn()::text")[0][0])


# ---- the catalog of one table ----------------------------------------------------------------

def table_oid(conn: Any, schema: str, table: str) -> int:
    return int(rows(conn, "SELECT %s::regclass::oid", (quoted(schema, table),))[0][0])


def identity(conn: Any, oid: int) -> str:
    """The table's replica identity: d(efault), n(othing), f(ull), i(ndex)."""
    return str(rows(conn, "SELECT relreplident FROM pg_class WHERE oid = %s", (oid,))[0][0])


def columns(conn: Any, oid: int) -> list[tuple[str, int, int, bool]]:
    """(name, type oid, typmod, not null) of the table's columns, in table order."""
    return [(n, int(t), int(m), bool(nn)) for n, t, m, nn in rows(
        conn, "SELECT attname, atttypid, atttypmod, attnotnull FROM pg_attribute WHERE "
              "attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum", (oid,))]


def primary_key(conn: Any, oid: int) -> tuple[str, ...]:
    return tuple(r[0] for r in rows(
        conn, "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
              "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s AND i.indisprimary "
              "ORDER BY array_position(i.indkey::int2[], a.attnum)", (oid,)))


def unique_keys(conn: Any, oid: int, replica_index_only: bool = False
                ) -> list[tuple[str, tuple[str, ...]]]:
    """(index, columns) of the table's UNIQUE indexes over NOT NULL columns without
    expressions or predicates: the replica identity index first, then by name."""
    found = rows(
        conn, "SELECT c.relname, i.indisreplident, array_agg(a.attname ORDER BY "
              "array_position(i.indkey::int2[], a.attnum)), bool_and(a.attnotnull) "
              "FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_attribute a "
              "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s "
              "AND i.indisunique AND i.indpred IS NULL AND NOT 0 = ANY(i.indkey::int2[]) "
              "GROUP BY c.relname, i.indisreplident ORDER BY NOT i.indisreplident, c.relname",
        (oid,))
    return [(name, tuple(cols)) for name, replident, cols, not_null in found
            if not_null and (replident or not replica_index_only)]


def types(conn: Any, oids: set[int]) -> dict[int, PgType]:
    """Type oid → the type, a domain resolved to its base type (with the domain's modifier)."""
    out: dict[int, PgType] = {}
    info = {int(o): (n, c, t, int(b), int(m)) for o, n, c, t, b, m in rows(
        conn, "SELECT oid, typname, typcategory, typtype, typbasetype, typtypmod FROM pg_type "
              "WHERE oid = ANY(%s)", (list(oids),))}
    for oid in oids:
        name, category, kind, base, base_mod = info[oid]
        typmod = -1
        while kind == "d":
            typmod = base_mod if typmod == -1 else typmod
            name, category, kind, base, base_mod = rows(
                conn, "SELECT typname, typcategory, typtype, typbasetype, typtypmod FROM "
                      "pg_type WHERE oid = %s", (base,))[0]
        out[oid] = PgType(oid, name, category, typmod)
    return out


def without_identity(conn: Any, source: SourceConfig) -> list[str]:
    """Tables with REPLICA IDENTITY NOTHING (or DEFAULT without a primary key): their updates
    and deletes cannot be published."""
    return [f"{s}.{t}" for s, t, ident, has_pk in rows(
        conn, "SELECT n.nspname, c.relname, c.relreplident, EXISTS (SELECT 1 FROM pg_index i "
              "WHERE i.indrelid = c.oid AND i.indisprimary) FROM pg_class c JOIN pg_namespace n "
              "ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'p')")
        if included(source, s, t) and (ident == "n" or (ident == "d" and not has_pk))]


def no_identity_error(source: SourceConfig, table: str) -> str:
    schema, name = table.split(".", 1)
    return (f"table {table} has no replica identity (REPLICA IDENTITY NOTHING, or DEFAULT "
            "without a primary key): PostgreSQL cannot say which row an update or delete "
            f"changed. Run ALTER TABLE {quoted(schema, name)} REPLICA IDENTITY FULL (or add a "
            f"primary key, or REPLICA IDENTITY USING INDEX <a unique index>), or exclude it "
            f"from source {source.name} (docs/postgres-source.md)")


# A private cluster's settings for logical replication (tests, the benchmark, the demo).
LOCAL_SETTINGS = ("wal_level=logical", "max_replication_slots=20", "max_wal_senders=20")
