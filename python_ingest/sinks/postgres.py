"""The PostgreSQL sink: a table kept equal to a lake table, exactly once.

One transaction per dispersal (docs/dispersal.md, "Exactly once"):

1. lock this target's row in ``sluice_dispersal`` (job, target, lake position) and read the
   position the table holds;
2. create the table from the lake's columns if it is new (``pgtypes``; ``_row_key`` is the
   primary key), add columns the lake gained since; a first dispersal empties it;
3. COPY the change set (Spark makes the COPY text; the driver streams it a chunk at a time)
   into a temporary staging table, then one ``INSERT ... ON CONFLICT DO UPDATE`` and one
   ``DELETE ... USING``;
4. write the new position into ``sluice_dispersal`` and commit.

Rows and position commit together or not at all, so a crash anywhere leaves the old position
with the old rows, and the rerun sends the same range again.
"""

from __future__ import annotations

import logging
import re
import time
from typing import TYPE_CHECKING, Any

from python_ingest.config.dispersal import PostgresTarget
from python_ingest.config.secrets import password_in, redact
from python_ingest.exceptions import DispersalError, DispersalPositionError
from python_ingest.runtime.faults import fault_point
from python_ingest.sinks.changes import DELETE, OP, Position, changes, target_columns
from python_ingest.sinks.pgtypes import copy_line, pg_type
from python_ingest.sinks.result import DispersalResult
from python_ingest.tables.names import JobTables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

BOOKKEEPING = "sluice_dispersal"
STAGE = "sluice_dispersal_stage"
BOOKKEEPING_DDL = f"""create table if not exists {BOOKKEEPING} (
    job text not null,
    target text not null,
    target_table text not null,
    lake_table text not null,
    lake_commit text not null,
    batch_id bigint not null,
    dispersed_at timestamptz not null default now(),
    primary key (job, target))"""


def quoted(name: str) -> str:
    """A [schema.]name as quoted identifiers."""
    return ".".join(f'"{part}"' for part in name.split("."))


def connect(target: PostgresTarget, where: str) -> Any:
    """A connection to the target's database (autocommit off: one transaction). A failure
    is a DispersalError that never quotes the password (#35.5), nor chains the driver's
    error (libpq's message on a DSN it cannot read quotes the piece it stumbled on)."""
    import psycopg

    dsn, password = target.conninfo(where)
    try:
        if password is not None:
            return psycopg.connect(dsn, password=password)
        return psycopg.connect(dsn)
    except psycopg.OperationalError as exc:
        reason = redact(str(exc), password, password_in(dsn)).strip()
        raise DispersalError(f"{where}: cannot connect to PostgreSQL: {reason}") from None
    except psycopg.Error as exc:  # a connection string libpq cannot read
        reason = _QUOTED.sub(_unquoted, redact(str(exc), password, password_in(dsn))).strip()
        raise DispersalError(
            f"{where}: PostgreSQL's client cannot read the connection string ({reason}); "
            "give a libpq key=value string or a postgresql:// URL (a password in a URL "
            "percent-encoded), or the password in password_env / password_file") from None


_QUOTED = re.compile(r'"([^"]*)"')  # a piece of the connection string libpq quotes


def _unquoted(found: re.Match[str]) -> str:
    """A quoted piece of a connection string left out, but for a lone '=' (what is missing)."""
    return found.group(0) if found.group(1) == "=" else '"…"'


def stored_position(conn: Any, job: str, target: str) -> Position | None:
    """The position the target holds (None: never dispersed); locks its row until commit."""
    with conn.cursor() as cur:
        cur.execute(BOOKKEEPING_DDL)
        cur.execute(f"select lake_commit, batch_id from {BOOKKEEPING} "
                    "where job = %s and target = %s for update", (job, target))
        row = cur.fetchone()
    return None if row is None else Position(str(row[0]), int(row[1]))


def disperse_postgres(spark: SparkSession, tables: JobTables, target: PostgresTarget,
                      until: Position) -> DispersalResult:
    """Bring the target table to the lake's position ``until``, in one transaction."""
    import psycopg

    where = f"jobs.{tables.job}.dispersal.{target.name}"
    try:
        return _disperse(spark, tables, target, until, where)
    except psycopg.Error as exc:
        dsn = target.dsn or ""
        reason = redact(str(exc), target.password, password_in(dsn)).strip().rstrip(".")
        raise DispersalError(
            f"{where}: PostgreSQL refused the dispersal into {target.table}: {reason}. Nothing "
            "was committed and the position did not move; fix the table or the database (a "
            "column of another type than the lake's? see docs/dispersal.md, Type mapping) and "
            "run again") from exc


def _disperse(spark: SparkSession, tables: JobTables, target: PostgresTarget,
              until: Position, where: str) -> DispersalResult:
    """The transaction of ``disperse_postgres`` (steps 1-4 of the module's docstring)."""
    started = time.monotonic()
    with connect(target, where) as conn:
        since = stored_position(conn, tables.job, target.name)
        if since is not None and since.batch_id > until.batch_id:
            raise DispersalPositionError(target.name, f"it holds batch {since.batch_id} but "
                                         f"the lake is at batch {until.batch_id}")
        if since is not None and since.batch_id == until.batch_id:
            conn.rollback()
            return DispersalResult(tables.job, target.name, since, until, 0, 0, 0.0)
        columns = target_columns(spark, tables)
        _prepare_table(conn, target.table, columns, full_copy=since is None)
        frame = changes(spark, tables, since, until)
        lines = frame.select(copy_line([(OP, "string"), *columns]).alias("line"))
        prepared = time.monotonic()
        staged = _stage(conn, target.table, columns, lines, target.chunk_rows)
        copied = time.monotonic()
        upserted, deleted = _apply(conn, target.table, [n for n, _ in columns])
        applied = time.monotonic()
        with conn.cursor() as cur:
            cur.execute(
                f"insert into {BOOKKEEPING} (job, target, target_table, lake_table, "
                "lake_commit, batch_id, dispersed_at) values (%s, %s, %s, %s, %s, %s, now()) "
                "on conflict (job, target) do update set target_table = excluded.target_table, "
                "lake_table = excluded.lake_table, lake_commit = excluded.lake_commit, "
                "batch_id = excluded.batch_id, dispersed_at = excluded.dispersed_at",
                (tables.job, target.name, target.table, tables.lake, until.commit,
                 until.batch_id))
        fault_point("disperse_before_commit")
        conn.commit()
    fault_point("disperse_after_commit")
    committed = time.monotonic()
    seconds = committed - started
    log.info("dispersed %s to %s (%s): %d staged, %d upserted, %d deleted in %.1fs (prepare "
             "%.1fs, read and COPY %.1fs, upsert and delete %.1fs, commit %.1fs)", tables.lake,
             target.name, target.table, staged, upserted, deleted, seconds,
             prepared - started, copied - prepared, applied - copied, committed - applied)
    return DispersalResult(tables.job, target.name, since, until, upserted, deleted, seconds)


def _prepare_table(conn: Any, table: str, columns: list[tuple[str, str]],
                   full_copy: bool) -> None:
    """Create the table (key ``_row_key``), add new lake columns; a full copy empties it."""
    ddl = ", ".join(f'"{n}" {pg_type(t)}' for n, t in columns)
    with conn.cursor() as cur:
        if "." in table:
            cur.execute(f'create schema if not exists "{table.split(".")[0]}"')
        cur.execute(f"create table if not exists {quoted(table)} ({ddl}, "
                    'primary key ("_row_key"))')
        for name, spark_type in columns:
            cur.execute(f'alter table {quoted(table)} add column if not exists "{name}" '
                        f"{pg_type(spark_type)}")
        if full_copy:
            cur.execute(f"truncate {quoted(table)}")


def _stage(conn: Any, table: str, columns: list[tuple[str, str]], lines: Any,
           chunk_rows: int) -> int:
    """COPY the change set's lines into a temporary staging table, a chunk at a time
    (Spark hands the driver one partition at a time: never the whole set in memory)."""
    names = ", ".join(f'"{n}"' for n, _ in columns)
    staged = 0
    with conn.cursor() as cur:
        cur.execute(f"create temporary table {STAGE} (\"{OP}\" text, "
                    + ", ".join(f'"{n}" {pg_type(t)}' for n, t in columns)
                    + ") on commit drop")
        with cur.copy(f'copy {STAGE} ("{OP}", {names}) from stdin') as copy:
            chunk: list[str] = []
            for row in lines.toLocalIterator(prefetchPartitions=True):
                chunk.append(row[0])
                if len(chunk) >= chunk_rows:
                    copy.write(("\n".join(chunk) + "\n").encode())
                    staged += len(chunk)
                    chunk = []
            if chunk:
                copy.write(("\n".join(chunk) + "\n").encode())
                staged += len(chunk)
    fault_point("disperse_after_copy")
    return staged


def _apply(conn: Any, table: str, names: list[str]) -> tuple[int, int]:
    """Upsert the staged rows and delete the staged keys; returns (upserted, deleted)."""
    listed = ", ".join(f'"{n}"' for n in names)
    updates = ", ".join(f'"{n}" = excluded."{n}"' for n in names if n != "_row_key")
    with conn.cursor() as cur:
        cur.execute(f"insert into {quoted(table)} ({listed}) select {listed} from {STAGE} "
                    f"where \"{OP}\" <> '{DELETE}' on conflict (\"_row_key\") do update set "
                    f"{updates}")
        upserted = cur.rowcount
        cur.execute(f"delete from {quoted(table)} as t using {STAGE} as s where "
                    f"s.\"{OP}\" = '{DELETE}' and t.\"_row_key\" = s.\"_row_key\"")
        deleted = cur.rowcount
    return int(upserted), int(deleted)
