"""`sluice verify` against a PostgreSQL source: its tables' columns as verify compares
them (verify/canonical_pg.py), a consistent snapshot and the LSN it stands at.

The PostgreSQL side of run.py, as the functions there are the MariaDB/MySQL side: the same
ranges, bisection and row diff (compare.py), with PostgreSQL SQL on the source and MD5 as the
hash both sides compute.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from python_ingest.config import JobConfig, SourceConfig
from python_ingest.exceptions import SluiceError
from python_ingest.sources.postgres import server
from python_ingest.sources.postgres.shapes import table_shape
from python_ingest.tables.formats import table_exists
from python_ingest.verify.canonical_pg import PgColumn
from python_ingest.verify.compare import Target, key_first
from python_ingest.verify.kinds import SourceVerify

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def connect(source: SourceConfig) -> Any:
    """A read-only connection whose transactions are REPEATABLE READ: each is one snapshot
    (the first statement takes it; ``rollback()`` ends it)."""
    conn = server.connect(source)
    conn.autocommit = False
    conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
    return conn


def resolve_target(spark: SparkSession, conn: Any, source: SourceConfig, job: JobConfig,
                   lake_table: str, schema: str, table: str) -> Target:
    """The columns both sides hold (the key first), with the tap's kind of each."""
    if not table_exists(spark, lake_table):
        raise SluiceError(f"{lake_table} does not exist yet: run 'sluice run {job.name}' first")
    lake_types = {f.name.lower(): f.dataType.simpleString()
                  for f in spark.table(lake_table).schema.fields if not f.name.startswith("_")}
    found = table_shape(conn, source, schema, table)
    oid = server.table_oid(conn, schema, table)
    pg_types = server.types(conn, {t for _n, t, _m, _nn in server.columns(conn, oid)})
    type_names = {n: pg_types[t].name for n, t, _m, _nn in server.columns(conn, oid)}
    conn.rollback()  # the catalog reads were a transaction of their own
    columns = {spec.name: PgColumn(spec.name, spec.kind, type_names.get(spec.name, ""),
                                   lake_types[spec.name.lower()])
               for spec in found.shape.columns if spec.name.lower() in lake_types}
    ordered = key_first(job, columns, f"{schema}.{table}", lake_table)
    return Target(job.name, lake_table, server.quoted(schema, table), job.row_key,
                  tuple(ordered), dialect="postgres", hash="md5")


def snapshot(conn: Any) -> str:
    """Start the snapshot the comparison reads; returns the WAL position it stands at (the
    changes committed before it are in it)."""
    with conn.cursor() as cur:
        cur.execute("SELECT pg_current_wal_lsn()::text")
        return str(cur.fetchone()[0])


def estimate(conn: Any, schema: str, table: str) -> int:
    """The planner's row count of the table (0 when never analysed)."""
    with conn.cursor() as cur:
        cur.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                    (server.quoted(schema, table),))
        row = cur.fetchone()
    return max(0, int(row[0] or 0)) if row else 0


class PgVerify(SourceVerify):
    """PostgreSQL: REPEATABLE READ read-only snapshots, positions in the WAL (LSNs)."""

    position_kind = "LSN"

    def connect(self, source: SourceConfig) -> Any:
        return connect(source)

    def resolve_target(self, spark: SparkSession, conn: Any, source: SourceConfig,
                       job: JobConfig, lake_table: str, db: str, table: str) -> Target:
        return resolve_target(spark, conn, source, job, lake_table, db, table)

    def snapshot(self, conn: Any) -> str:
        return snapshot(conn)

    def estimate(self, conn: Any, db: str, table: str) -> int:
        return estimate(conn, db, table)
