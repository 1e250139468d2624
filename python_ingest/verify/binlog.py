"""`sluice verify` against a MariaDB/MySQL source: its columns as verify compares them
(verify/canonical.py), a consistent snapshot and the binlog position it stands at. The
MariaDB/MySQL side of run.py, as verify/postgres.py is the PostgreSQL side."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from python_ingest.config import JobConfig, SourceConfig
from python_ingest.exceptions import SluiceError
from python_ingest.sources.binlog import server
from python_ingest.tables.formats import table_exists
from python_ingest.verify.canonical import Column
from python_ingest.verify.compare import Target, key_first
from python_ingest.verify.kinds import SourceVerify

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class BinlogVerify(SourceVerify):
    """MariaDB/MySQL: REPEATABLE READ snapshots, positions in the binlog."""

    position_kind = "binlog"

    def connect(self, source: SourceConfig) -> Any:
        return server.connect(source)

    def resolve_target(self, spark: SparkSession, conn: Any, source: SourceConfig,
                       job: JobConfig, lake_table: str, db: str, table: str) -> Target:
        return resolve_target(spark, conn, job, lake_table, db, table)

    def snapshot(self, conn: Any) -> str:
        return snapshot(conn)

    def estimate(self, conn: Any, db: str, table: str) -> int:
        return estimate(conn, db, table)


def resolve_target(spark: SparkSession, conn: Any, job: JobConfig, lake_table: str, db: str,
                   table: str) -> Target:
    """The columns both sides hold (the key first), with their types on each side."""
    if not table_exists(spark, lake_table):
        raise SluiceError(f"{lake_table} does not exist yet: run 'sluice run {job.name}' first")
    lake_types = {f.name.lower(): f.dataType.simpleString()
                  for f in spark.table(lake_table).schema.fields if not f.name.startswith("_")}
    with conn.cursor() as cur:
        cur.execute("SELECT COLUMN_NAME, DATA_TYPE, NUMERIC_SCALE, IS_NULLABLE FROM "
                    "information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s "
                    "ORDER BY ORDINAL_POSITION", (db, table))
        source_columns = cur.fetchall()
    columns = {str(name): Column(str(name), str(kind).lower(), int(scale or 0),
                                 lake_types[str(name).lower()], nullable == "YES")
               for name, kind, scale, nullable in source_columns
               if str(name).lower() in lake_types}
    ordered = key_first(job, columns, f"{db}.{table}", lake_table)
    return Target(job.name, lake_table, f"{server.quote(db)}.{server.quote(table)}",
                  job.row_key, tuple(ordered))


def snapshot(conn: Any) -> str:
    """Start a consistent snapshot on ``conn``; returns its binlog position (as far as known)."""
    with conn.cursor() as cur:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")  # MariaDB: the snapshot's position
        status = dict(cur.fetchall())
        if status.get("Binlog_snapshot_file"):
            return f"{status['Binlog_snapshot_file']}:{status['Binlog_snapshot_position']}"
        cur.execute("SHOW MASTER STATUS")  # MySQL: close to it
        row = cur.fetchone()
        return f"{row[0]}:{row[1]}" if row else "unknown"


def estimate(conn: Any, db: str, table: str) -> int:
    with conn.cursor() as cur:
        cur.execute("SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s "
                    "AND TABLE_NAME=%s", (db, table))
        row = cur.fetchone()
    return int(row[0] or 0) if row else 0
