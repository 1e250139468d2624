"""Apache Iceberg tables (``table_format: iceberg``): creation, appends with snapshot
properties, and the snapshot history checkpoints are read from.

A checkpoint is a snapshot summary property of the commit that wrote the rows it covers.
SQL statements (dbt's MERGE) get their properties from Iceberg's
``CommitMetadata.withCommitProperties``, a JVM thread-local: dbt runs single-threaded inside
that call (a py4j callback whose Spark calls stay on the calling JVM thread).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from python_ingest.runtime.catalog import refuse_other_format
from python_ingest.tables.evolve import widen

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)
T = TypeVar("T")

DELETE_RATIO = 0.3  # a data file is rewritten once this share of its rows is deleted
# orphan files younger than this stay: a write in flight has files no snapshot references yet
# (Iceberg's own default; a job's tables have one writer, but a crashed one's files may be new)
ORPHAN_AGE_S = 3 * 24 * 3600
CHECKPOINT_PREFIX = "sluice."  # snapshot properties that hold checkpoints (tables/checkpoints.py)

TABLE_PROPERTIES = {
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
}


class IcebergFormat:
    """``tables.formats.TableFormat`` for Iceberg (Spark's default catalog is Iceberg's)."""

    name = "iceberg"

    def create_history(self, spark: SparkSession, table: str, ddl: str) -> None:
        """A history table (steps/history/writer.py): format v2, merge-on-read deletes."""
        spark.sql(f"create table {table} ({ddl}) using iceberg tblproperties "
                  "('format-version'='2', 'write.delete.mode'='merge-on-read', "
                  "'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read')")

    def refresh_schema(self, spark: SparkSession, table: str) -> None:
        """Nothing: the Iceberg catalog reads each table's metadata from the warehouse."""

    def exists(self, spark: SparkSession, table: str) -> bool:
        """Whether the catalog knows ``table`` (a catalog call, no Spark job). A two-part name
        is looked up in the default catalog only (pyspark's tableExists also answers from the
        session catalog, where a Hudi session of the same application names its tables)."""
        return bool(spark.catalog.tableExists(self._qualified(spark, table)))

    def ensure_table(self, spark: SparkSession, table: str,
                     columns: Iterable[tuple[str, str]]) -> None:
        columns = list(columns)
        if not self.exists(spark, table):
            refuse_other_format(spark, table, "iceberg")
            ddl = ", ".join(f"`{n}` {t}" for n, t in columns)
            props = ", ".join(f"'{k}'='{v}'" for k, v in TABLE_PROPERTIES.items())
            spark.sql(f"create table if not exists {table} ({ddl}) using iceberg "
                      f"tblproperties ({props})")
            log.info("created table %s", table)
            return
        schema = spark.table(table).schema
        existing = {f.name for f in schema.fields}
        widen(spark, table, columns, schema)  # a column's type the new rows widen (evolve.py)
        for name, spark_type in columns:
            if name not in existing:
                spark.sql(f"alter table {table} add column `{name}` {spark_type}")
                log.info("added column %s %s to %s", name, spark_type, table)

    def append(self, df: DataFrame, table: str, properties: Mapping[str, str]) -> None:
        writer = df.writeTo(table)
        for key, value in properties.items():
            writer = writer.option(f"snapshot-property.{key}", value)
        writer.append()

    def commit_properties(self, spark: SparkSession,
                          table: str) -> Iterator[Mapping[str, str]]:
        """Snapshot summaries from the current one back through its parents (Iceberg's Java
        API: milliseconds, where a metadata-table query costs a Spark job)."""
        if not self.exists(spark, table):
            return
        for snapshot in _ancestry(_load(spark, table)):
            yield dict(snapshot.summary())

    def history_complete(self, spark: SparkSession, table: str) -> bool:
        """False when an ancestor of the current snapshot has been expired."""
        if not self.exists(spark, table):
            return True
        oldest = None
        for snapshot in _ancestry(_load(spark, table)):
            oldest = snapshot
        return oldest is None or oldest.parentId() is None

    def committing(self, spark: SparkSession, properties: Mapping[str, str],
                   action: Callable[[], T]) -> T:
        return with_commit_properties(spark, properties, action)

    def commit_times(self, spark: SparkSession, table: str) -> list[datetime]:
        if not self.exists(spark, table):
            return []
        snapshots = _load(spark, table).snapshots()
        return [datetime.fromtimestamp(s.timestampMillis() / 1000) for s in snapshots]

    def payload_columns(self, spark: SparkSession, table: str) -> list[str]:
        return [f.name for f in spark.table(table).schema.fields]

    def maintain(self, spark: SparkSession, table: str, merged: bool,
                 keep_commits: int, orphans: bool = False) -> list[str]:
        """A lake table (merge-on-read: a position delete file per merge): data files whose
        rows are deleted beyond ``DELETE_RATIO`` rewritten, then the position delete files.
        Every table: snapshots expired but the newest ``keep_commits`` and every snapshot from
        the oldest one still carrying a checkpoint on (``_protected_since``); with ``orphans``
        (``sluice maintain``), files no snapshot references and older than ``ORPHAN_AGE``
        removed (a listing of the whole table: not inline)."""
        catalog = spark.conf.get("spark.sql.defaultCatalog")
        qualified = self._qualified(spark, table)
        done = []
        if merged:
            rows = spark.sql(f"call {catalog}.system.rewrite_data_files(table => '{table}', "
                             f"options => map('delete-ratio-threshold', '{DELETE_RATIO}'))"
                             ).collect()
            done.append(f"rewrote {sum(int(r[0] or 0) for r in rows)} data file(s)")
            rows = spark.sql(f"call {catalog}.system.rewrite_position_delete_files("
                             f"table => '{table}')").collect()
            done.append(f"rewrote {sum(int(r[0] or 0) for r in rows)} position delete file(s)")
        iceberg = _load(spark, qualified)
        before = _count(iceberg.snapshots())
        since = _protected_since(iceberg)
        older_than = since if since is not None else int(time.time() * 1000)
        spark.sql(f"call {catalog}.system.expire_snapshots(table => '{table}', "
                  f"older_than => TIMESTAMP '{_timestamp(older_than)}', "
                  f"retain_last => {max(1, keep_commits)})").collect()
        after = _count(_load(spark, qualified).snapshots())
        done.append(f"expired {before - after} snapshot(s) (kept {after}: the newest "
                    f"{keep_commits} and those from the oldest one holding a checkpoint on)")
        if orphans:
            cutoff = int((time.time() - ORPHAN_AGE_S) * 1000)
            rows = spark.sql(f"call {catalog}.system.remove_orphan_files(table => '{table}', "
                             f"older_than => TIMESTAMP '{_timestamp(cutoff)}')").collect()
            done.append(f"removed {len(rows)} orphan file(s)")
        return done

    def live_files(self, spark: SparkSession, table: str) -> int:
        """The data files of the current snapshot."""
        return int(spark.sql(f"select count(*) from {table}.data_files").collect()[0][0])

    def compact_files(self, spark: SparkSession, table: str) -> None:
        """The small data files (under 75% of the 512 MB target) rewritten, sorted by batch; a
        replace snapshot without checkpoint properties (readers take them from the snapshot
        before)."""
        catalog = spark.conf.get("spark.sql.defaultCatalog")
        spark.sql(f"call {catalog}.system.rewrite_data_files(table => '{table}', "
                  "strategy => 'sort', sort_order => '_batch_id', "
                  "options => map('min-input-files', '2'))").collect()

    def position(self, spark: SparkSession, table: str) -> str | None:
        if not self.exists(spark, table):
            return None
        snapshot = _load(spark, table).currentSnapshot()
        return None if snapshot is None else str(snapshot.snapshotId())

    def read_changes(self, spark: SparkSession, table: str, since: str | None,
                     until: str) -> DataFrame:
        """The table as of snapshot ``until``: Iceberg's incremental scan reads append
        snapshots only and its changelog scan refuses delete files, and lake merges commit
        both (merge-on-read); the caller narrows the rows by ``_batch_id``."""
        return spark.read.format("iceberg").option("snapshot-id", int(until)).load(
            self._qualified(spark, table))

    def _qualified(self, spark: SparkSession, table: str) -> str:
        if table.replace("`", "").count(".") == 1:
            return f"{spark.conf.get('spark.sql.defaultCatalog')}.{table}"
        return table


ICEBERG = IcebergFormat()


def _protected_since(iceberg: Any) -> int | None:
    """When (ms) the oldest snapshot was committed that is the newest carrier of one of the
    checkpoint properties in the current history: expiring it or anything after it could lose
    a checkpoint (read_checkpoint and step_checkpoint read the newest carrier of their key)."""
    seen: set[str] = set()
    oldest = None
    for snapshot in _ancestry(iceberg):
        keys = {str(k) for k in snapshot.summary().keySet()
                if str(k).startswith(CHECKPOINT_PREFIX)} - seen
        if keys:
            seen |= keys
            oldest = int(snapshot.timestampMillis())
    return oldest


def _ancestry(iceberg: Any) -> Iterator[Any]:
    """The current snapshot and its parents, newest first, as far as they are not expired."""
    snapshot = iceberg.currentSnapshot()
    while snapshot is not None:
        yield snapshot
        parent = snapshot.parentId()
        snapshot = iceberg.snapshot(parent) if parent is not None else None


def _timestamp(millis: int) -> str:
    """A TIMESTAMP literal (the session's time zone is UTC: runtime/session.py)."""
    return datetime.fromtimestamp(millis / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _count(java_iterable: Any) -> int:
    return sum(1 for _ in java_iterable)


def _load(spark: SparkSession, table: str) -> Any:
    return spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(  # type: ignore[union-attr]
        spark._jsparkSession, table)


def with_commit_properties(spark: SparkSession, properties: Mapping[str, str],
                           action: Callable[[], T]) -> T:
    """Run ``action`` so that every Iceberg commit it makes carries ``properties``.

    Iceberg keeps the properties in a JVM thread-local. ``action`` runs as a py4j callback of
    that JVM thread, and py4j runs a callback's own JVM calls on the calling thread, so its
    Spark statements (and a single-threaded dbt) commit with the properties.
    """
    from pyspark.java_gateway import ensure_callback_server_started

    gateway = spark.sparkContext._gateway
    assert gateway is not None
    ensure_callback_server_started(gateway)
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    outcome: dict[str, Any] = {}

    class Task:
        def call(self) -> None:
            try:
                outcome["value"] = action()
            except BaseException as exc:  # handed back to the caller below
                outcome["error"] = exc

        class Java:
            implements = ["java.util.concurrent.Callable"]

    java_props = jvm.java.util.HashMap()
    for key, value in properties.items():
        java_props.put(key, value)
    jvm.org.apache.iceberg.spark.CommitMetadata.withCommitProperties(
        java_props, Task(), jvm.java.lang.Class.forName("java.lang.RuntimeException"))
    if "error" in outcome:
        raise outcome["error"]
    result: T = outcome["value"]
    return result
