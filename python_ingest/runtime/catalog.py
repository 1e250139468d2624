"""Spark's session catalog for Hudi tables: one name per table in every process.

Hudi tables live in Spark's session catalog (``HoodieCatalog``) at
``<warehouse>/<namespace>/<table>``. That catalog is in memory, one per process, so each
process registers the tables it finds on disk by location (``register_tables`` at session
start; ``tables.hudi`` registers tables another process created since): every process sees the
same tables by the same names without a metastore. Several hosts need a shared metastore
instead (docs/formats.md).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from python_ingest.exceptions import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

FORMAT_CONF = "spark.sluice.table_format"  # which format the session writes
WAREHOUSE_CONF = "spark.sluice.warehouse"  # where Hudi tables live
HUDI_COMMIT_PREFIX = "sluice."  # settings and options with it become Hudi commit metadata
# Every Hudi write: several processes may commit to one table (two jobs' runs to meta.runs, a
# runner and a manual run): optimistic concurrency with a lock file beside the table (any
# Hadoop file system with atomic create: local disk, HDFS), failed writes rolled back lazily
# (after their heartbeat stops) instead of by the next writer, which could be another live
# one; no per-write timeline server (it starts a web server for every write), plain markers.
HUDI_WRITE_CONF = {
    "hoodie.write.concurrency.mode": "optimistic_concurrency_control",
    "hoodie.cleaner.policy.failed.writes": "LAZY",
    "hoodie.write.lock.provider":
        "org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider",
    "hoodie.embed.timeline.server": "false",
    "hoodie.write.markers.type": "DIRECT",
}


def location(spark: SparkSession, table: str) -> str:
    """Where a Hudi table of this session's warehouse lives: <warehouse>/<namespace>/<name>."""
    namespace, name = split_name(table)
    return f"{spark.conf.get(WAREHOUSE_CONF)}/{namespace}/{name}"


def register(spark: SparkSession, table: str, path: str) -> None:
    """Name an existing Hudi table in this process's catalog (its schema is on disk)."""
    spark.sql(f"create table if not exists {table} using hudi location '{path}'")
    log.debug("registered Hudi table %s at %s", table, path)


def register_tables(spark: SparkSession, namespaces: Iterable[str]) -> int:
    """Create the namespaces (folders of the warehouse) and register every Hudi table in
    them; returns how many tables were registered."""
    warehouse = spark.conf.get(WAREHOUSE_CONF)
    registered = 0
    for namespace in namespaces:
        spark.sql(f"create database if not exists {namespace} location '{warehouse}/{namespace}'")
        for name in _fs_children(spark, f"{warehouse}/{namespace}"):
            path = f"{warehouse}/{namespace}/{name}"
            if not fs_exists(spark, f"{path}/.hoodie/hoodie.properties"):
                continue
            try:
                register(spark, f"{namespace}.{name}", path)
                registered += 1
            except Exception as exc:  # one unreadable table must not stop every job
                log.warning("Hudi table %s.%s at %s could not be registered (%s); it is tried "
                            "again when a job uses it", namespace, name, path,
                            _first_line(exc))
    return registered


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def refuse_other_format(spark: SparkSession, table: str, wanted: str) -> None:
    """Raise before creating ``table`` in format ``wanted`` where a table of the other format
    already lives (both lay tables out as ``<warehouse>/<namespace>/<table>``)."""
    path = location(spark, table)
    other, marker = ("Iceberg", "metadata") if wanted == "hudi" else ("Hudi", ".hoodie")
    if fs_exists(spark, f"{path}/{marker}"):
        raise ConfigError(
            "table_format", f"{table}: an {other} table already lives at {path}, and "
            f"table_format is now {wanted}", "a warehouse holds the tables of one format: set "
            f"table_format back to {other.lower()}, or point catalog.warehouse at a new folder "
            f"for {wanted} tables")


def split_name(table: str) -> tuple[str, str]:
    parts = table.replace("`", "").split(".")
    return parts[-2], parts[-1]


def _hadoop_path(spark: SparkSession, path: str) -> tuple[Any, Any]:
    jvm = spark._jvm
    assert jvm is not None
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    return hpath, hpath.getFileSystem(spark._jsc.hadoopConfiguration())


def fs_exists(spark: SparkSession, path: str) -> bool:
    hpath, fs = _hadoop_path(spark, path)
    return bool(fs.exists(hpath))


def _fs_children(spark: SparkSession, path: str) -> list[str]:
    hpath, fs = _hadoop_path(spark, path)
    if not fs.exists(hpath):
        return []
    return sorted(s.getPath().getName() for s in fs.listStatus(hpath) if s.isDirectory()
                  and not s.getPath().getName().startswith("."))
