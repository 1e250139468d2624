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
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from python_ingest.config.table_formats import FORMATS, format_named, session_format
from python_ingest.exceptions import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

WAREHOUSE_CONF = "spark.sluice.warehouse"  # where Hudi tables live
PERMISSIONS_CONF = "spark.sluice.table_permissions"  # owner or group: the namespaces' mode
HUDI_COMMIT_PREFIX = "sluice."  # settings and options with it become Hudi commit metadata
# Hudi writes come in two kinds (docs/formats.md, "Several processes"):
# - a job's own tables (raw, errors, staging, lake, tombstones) are written only by the holder
#   of the job's lease (tables/lease.py: one run of a job at a time, in any process; `sluice
#   maintain` and a plain `dbt run` take it too), so they are single-writer: no lock, no
#   heartbeat, a failed write rolled back by the next one (eagerly). That costs about 0.5 s
#   per small commit instead of 1.6 s (docs/runner.md);
# - tables every job's runs write (``meta.runs``, any other ``meta`` table but a job's
#   tombstones) take optimistic concurrency with a lock file beside the table (any Hadoop file
#   system with atomic create: local disk, HDFS) and failed writes rolled back lazily, once
#   their heartbeat stops, never by another live writer (``SHARED_WRITE_CONF``, per write).
# Neither starts a per-write timeline server (a web server for every write); plain markers.
BLOOM_ENTRIES = 1000
HUDI_WRITE_CONF = {
    "hoodie.write.concurrency.mode": "single_writer",
    "hoodie.cleaner.policy.failed.writes": "EAGER",
    "hoodie.embed.timeline.server": "false",
    "hoodie.write.markers.type": "DIRECT",
    # Hudi puts a bloom filter of the record keys in every parquet file it writes, for its
    # BLOOM index, which no sluice table uses. Sized by default for 60,000 keys at a 1e-9 false
    # positive rate, it made each file's footer 430 KB, serialized at every write and read back
    # by every scan, however few its rows. A filter sized for 1,000 keys grows by more of them
    # as a file's keys outnumber it (DYNAMIC_V0: a filter of 1,000 more at 1e-9 each, up to
    # Hudi's 100,000 keys as before): a BLOOM-indexed table (a user's mart) finds the same rows
    "hoodie.index.bloom.num_entries": str(BLOOM_ENTRIES),
}
SHARED_WRITE_CONF = {
    **HUDI_WRITE_CONF,
    "hoodie.write.concurrency.mode": "optimistic_concurrency_control",
    "hoodie.cleaner.policy.failed.writes": "LAZY",
    "hoodie.write.lock.provider":
        "org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider",
}
# How sessions read Hudi tables: the reader Hudi 0.x had (Spark's vectorized parquet reader for
# base files, log records merged over them per file slice), not Hudi 1.0's file group reader.
# The same rows and values either way; here a full scan of a 1M-row lake took 0.93 s against
# 2.62 s with 21 batches of log files (0.48 against 1.40 s compacted), and a warm 100-event
# batch 10.6-11.0 s against 11.9-12.5 s (bench/batch_profile.py; docs/formats.md)
HUDI_READ_CONF = {"hoodie.file.group.reader.enabled": "false"}
JOB_META_SUFFIXES = ("__tombstones", "__index")  # meta.<job>__tombstones|index: a job's own


def shared_table(table: str) -> bool:
    """Whether several jobs' runs write ``table`` (a ``meta`` table but a job's tombstones
    and index)."""
    namespace, name = split_name(table)
    return namespace == "meta" and not name.endswith(JOB_META_SUFFIXES)


def location(spark: SparkSession, table: str) -> str:
    """Where a Hudi table of this session's warehouse lives: <warehouse>/<namespace>/<name>."""
    namespace, name = split_name(table)
    return f"{spark.conf.get(WAREHOUSE_CONF)}/{namespace}/{name}"


# Hudi keeps a table's *table* settings in .hoodie/hoodie.properties, but its *write*
# settings (index, metadata table, compaction) only in the catalog entry of the process that
# created it. Every other process names the table by location, so ``register`` gives it again
# the write settings of its kind; without them its writes fall back to Hudi's defaults: a
# metadata table (with column stats) built on an append-only table by the first insert of a
# new process, and a merge into a lake table looking keys up by scanning every file instead of
# the record index. A new lake's table properties: ``lake_properties`` (the lake_merge
# materialization reads them through the dbt plugin, the batch path creates a lake with them).
APPEND_ONLY_WRITE = {"hoodie.metadata.enable": "false"}
LAKE_WRITE = {
    "hoodie.metadata.record.index.enable": "true",
    "hoodie.index.type": "RECORD_INDEX",
    "hoodie.metadata.index.column.stats.enable": "false",
    "hoodie.metadata.index.partition.stats.enable": "false",
    "hoodie.compact.inline": "false",  # sluice compacts every N merges (steps/services.py)
    # and cleans right after (tables/hudi.py maintain): a clean after every merge cost each
    # merge another timeline action and metadata-table commit (~0.5 s), and every reader
    # listing files through the metadata table read its log block
    "hoodie.clean.automatic": "false",
    "hoodie.clean.commits.retained": "10",
}
MOR_ONLY_WRITE = ("hoodie.compact.", "hoodie.clean.automatic")  # sluice's services' part
# A lake table created with Hudi's bucket index (macros/sluice_lake_properties.sql): each key's
# file group is its hash bucket, so a merge is an upsert with no index look-up and no metadata
# table. Its index settings must never change (a key written to another bucket would be a
# second row), but Hudi keeps none of them on disk, and a `create table` over an existing
# table (``register``) rewrites hoodie.properties with the keys Hudi knows only. So sluice keeps
# them in a file of its own beside it (``keep_write_settings``, right after the table is
# created, before its first commit), and ``register`` gives them back. A keyed table without
# it is a record-index lake (the lakes sluice created before, a mart); a lake whose creation
# stopped before the file was written has no commit yet, so it becomes one, rows intact.
KEPT_FILE = ".hoodie/sluice_write.properties"
INSERT_OPERATION = "hoodie.spark.sql.insert.into.operation"  # what a SQL insert into Hudi is
RECORD_INDEX_ONLY = ("hoodie.metadata.record.index.", "hoodie.index.type",
                     "hoodie.metadata.index.")


def bucket_write(buckets: int) -> dict[str, str]:
    """The write settings of a Hudi table whose keys live in ``buckets`` hash buckets (a bucket
    lake, a history): no index look-up, no metadata table."""
    return {"hoodie.index.type": "BUCKET", "hoodie.index.bucket.engine": "SIMPLE",
            "hoodie.bucket.index.num.buckets": str(buckets),
            "hoodie.bucket.index.hash.field": "_row_key", "hoodie.metadata.enable": "false"}


def lake_properties(table_format: str, bucket: Mapping[str, str]) -> dict[str, str]:
    """A new lake table's properties: Iceberg's; Hudi's with the bucket settings ``bucket``
    (``bucket_write``), or with the record-level index when it is empty."""
    spec = format_named(table_format)
    own = dict(spec.lake_table)
    if not spec.bucket_lakes:  # Iceberg: its own keys only
        return own
    if not bucket:
        return {**own, **LAKE_WRITE}
    return {**own, **{k: v for k, v in LAKE_WRITE.items()
                      if not k.startswith(RECORD_INDEX_ONLY)}, **bucket}


def register(spark: SparkSession, table: str, path: str) -> None:
    """Name an existing Hudi table in this process's catalog (its schema is on disk), with
    the write settings of its kind: keyed (a lake table) or append-only."""
    config = table_config(spark, path)
    keyed = bool(config.get("hoodie.table.recordkey.fields"))
    write = LAKE_WRITE if keyed else APPEND_ONLY_WRITE
    kept = kept_write_settings(spark, path) if keyed else {}
    if kept:  # a bucket-index lake: its own index settings, no record index
        write = {**{k: v for k, v in LAKE_WRITE.items() if not k.startswith(RECORD_INDEX_ONLY)},
                 **kept}
    if config.get("hoodie.table.type") != "MERGE_ON_READ":  # a keyed copy-on-write table (a
        # mart dbt built): nothing to compact, and Hudi refuses compaction settings on it;
        # sluice's services do not clean it, so Hudi's automatic cleaning stays on
        write = {k: v for k, v in write.items() if not k.startswith(MOR_ONLY_WRITE)}
    props = ", ".join(f"'{k}'='{v}'" for k, v in write.items())
    spark.sql(f"create table if not exists {table} using hudi location '{path}' "
              f"tblproperties ({props})")
    log.debug("registered Hudi table %s at %s (%s)", table, path,
              "keyed" if keyed else "append-only")


@contextmanager
def insert_operation_kept(spark: SparkSession, *also: str) -> Iterator[None]:
    """Hudi's SQL insert operation of ``spark`` (and the settings ``also``) as it was before
    the block, also when the block fails: a bucket lake's merge sets it to upsert around its
    insert (the lake_merge materialization), and a failed merge must not leave the job's
    session upserting into its append-only tables."""
    before = {key: spark.conf.get(key, None) for key in (INSERT_OPERATION, *also)}
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def kept_write_settings(spark: SparkSession, path: str) -> dict[str, str]:
    """The write settings sluice kept for the Hudi table at ``path`` (``KEPT_FILE``)."""
    if not fs_exists(spark, f"{path}/{KEPT_FILE}"):
        return {}
    return _read_properties(spark, f"{path}/{KEPT_FILE}")


def keep_write_settings(spark: SparkSession, path: str, settings: dict[str, str]) -> None:
    """Keep ``settings`` for every later ``register`` of the Hudi table at ``path``: written
    to a temporary file, then renamed into place (a reader sees all of them or none)."""
    text = "".join(f"{key}={value}\n" for key, value in sorted(settings.items()))
    replace_file(spark, f"{path}/{KEPT_FILE}", text)
    log.info("kept the write settings of Hudi table %s in %s: %s", path, KEPT_FILE, settings)


def replace_file(spark: SparkSession, path: str, text: str) -> None:
    """Write ``text`` to the file at ``path`` (any Hadoop file system) through a temporary
    file renamed into place: a reader sees the old file or the new one, never a part."""
    jvm = spark._jvm
    assert jvm is not None
    final, fs = _hadoop_path(spark, path)
    temporary = jvm.org.apache.hadoop.fs.Path(f"{path}.tmp")
    stream = fs.create(temporary, True)
    try:
        stream.write(bytearray(text.encode()))
    finally:
        stream.close()
    if fs.exists(final):
        fs.delete(final, False)
    if not fs.rename(temporary, final):
        raise OSError(f"could not rename {temporary} to {final}")


def table_config(spark: SparkSession, path: str) -> dict[str, str]:
    """A Hudi table's own settings (``.hoodie/hoodie.properties``)."""
    return _read_properties(spark, f"{path}/.hoodie/hoodie.properties")


def _read_properties(spark: SparkSession, file: str) -> dict[str, str]:
    jvm = spark._jvm
    assert jvm is not None
    hpath, fs = _hadoop_path(spark, file)
    stream = fs.open(hpath)
    try:
        props = jvm.java.util.Properties()
        props.load(stream)
    finally:
        stream.close()
    return {str(k): str(props.getProperty(k)) for k in props.stringPropertyNames()}


def register_tables(spark: SparkSession, namespaces: Iterable[str], every: bool = True) -> int:
    """Create the namespaces (folders of the warehouse) and register the Hudi tables in them:
    every one, or (``every`` false) only the shared ones (``meta.runs``, ``shared_table``);
    returns how many tables were registered.

    Registering costs about 0.2 s a table (Hudi reads its timeline and schema), so a process
    that works on some jobs names only those jobs' tables, when it first works on each
    (``tables.formats.name_tables``), and any other table when it first checks that it
    exists (``tables.hudi``): a warehouse of a thousand tables would otherwise cost every
    CLI command minutes before its first step. A plain ``dbt run`` may read any table: it
    registers every one."""
    warehouse = spark.conf.get(WAREHOUSE_CONF)
    registered = 0
    for namespace in namespaces:
        spark.sql(f"create database if not exists {namespace} location '{warehouse}/{namespace}'")
        for name in _fs_children(spark, f"{warehouse}/{namespace}"):
            path = f"{warehouse}/{namespace}/{name}"
            if not every and not shared_table(f"{namespace}.{name}"):
                continue
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
    for other in FORMATS.values():
        if other.name == wanted or not fs_exists(spark, f"{path}/{other.marker}"):
            continue
        raise ConfigError(
            "table_format", f"{table}: an {other.title} table already lives at {path}, and "
            f"table_format is now {wanted}", "a table keeps the format it was created in: set "
            f"table_format (the project's, or the job's own) back to {other.name}, or point "
            f"catalog.warehouse at a new folder for {wanted} tables")


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


# The mode of every namespace folder holding source rows (#9.13, #35.6), by the project's
# ``table_permissions``: its owner alone, or also its group (reading, never writing)
NAMESPACE_MODES = {"owner": 0o700, "group": 0o750}


def restrict_namespace(spark: SparkSession, namespace: str) -> None:
    """Give ``<warehouse>/<namespace>`` the mode of ``table_permissions`` (``PERMISSIONS_CONF``:
    0700, or 0750 for ``group``; created so when missing), on any Hadoop file system. Every
    namespace holds source rows (raw, staging and lake tables, the rows that failed, the keys
    of the index), and a folder no one else may enter keeps every table below it private,
    whatever the permissions of the files each format writes inside."""
    jvm = spark._jvm
    assert jvm is not None
    mode = NAMESPACE_MODES[str(spark.conf.get(PERMISSIONS_CONF, "owner"))]
    hpath, fs = _hadoop_path(spark, f"{spark.conf.get(WAREHOUSE_CONF)}/{namespace}")
    wanted = jvm.org.apache.hadoop.fs.permission.FsPermission(jvm.java.lang.Short(mode))
    if not fs.exists(hpath):
        fs.mkdirs(hpath, wanted)
    if fs.getFileStatus(hpath).getPermission().toShort() != mode:
        fs.setPermission(hpath, wanted)


def _fs_children(spark: SparkSession, path: str) -> list[str]:
    hpath, fs = _hadoop_path(spark, path)
    if not fs.exists(hpath):
        return []
    return sorted(s.getPath().getName() for s in fs.listStatus(hpath) if s.isDirectory()
                  and not s.getPath().getName().startswith("."))


def drop_scratch(spark: SparkSession, table: str) -> None:
    """Drop a scratch table (a plain parquet table beside Hudi tables) and its files, also when
    this process's catalog does not know it: the in-memory catalog forgets a scratch table
    when its process ends, its files stay, and Spark refuses to create a managed table over a
    non-empty folder (LOCATION_ALREADY_EXISTS) in the next process."""
    spark.sql(f"drop table if exists {table} purge")
    if not session_format(spark).session_catalog:
        return  # a scratch table in the Iceberg catalog, which persists, leaves no files
    hpath, fs = _hadoop_path(spark, location(spark, table))
    if fs.exists(hpath):
        fs.delete(hpath, True)
        log.info("removed the files of scratch table %s left by an earlier process", table)
