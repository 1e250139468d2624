"""Apache Hudi tables (``table_format: hudi``): creation, appends whose commit
metadata holds the checkpoint, and the timeline checkpoints are read back from.

Names: see ``runtime.catalog`` (tables at ``<warehouse>/<namespace>/<table>``, registered by
location in each process's catalog; ``exists`` registers tables another process created).

Checkpoints. Write options and session settings starting with ``sluice.`` become the commit's
extra metadata (``hoodie.datasource.write.commitmeta.key.prefix``), so rows and checkpoint land
in one commit, as Hudi's own streamer keeps its checkpoint. An interrupted write leaves an
inflight instant that readers ignore and the next writer rolls back.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from python_ingest.runtime.catalog import (
    APPEND_ONLY_WRITE,
    HUDI_COMMIT_PREFIX,
    HUDI_WRITE_CONF,
    SHARED_WRITE_CONF,
    bucket_write,
    fs_exists,
    keep_write_settings,
    location,
    refuse_other_format,
    register,
    shared_table,
    split_name,
)
from python_ingest.tables.evolve import forget, widen
from python_ingest.tables.shared import locked_on_s3

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)
T = TypeVar("T")

COMMIT_PREFIX = HUDI_COMMIT_PREFIX  # keys: sluice.checkpoint, sluice.<step>.batch_id
CLEAN_EVERY = 10  # appends per automatic clean, on average
CREATE_RACE_TRIES, CREATE_RACE_WAIT_S = 20, 0.5  # another process creating the same table
# clustering of append-only tables: files under 32 MB (a batch's, or earlier clusterings'
# while the table is young) are rewritten into files of up to 128 MB; larger ones stay
CLUSTERING_OPTIONS = ("hoodie.clustering.plan.strategy.small.file.limit=33554432,"
                      "hoodie.clustering.plan.strategy.target.file.max.bytes=134217728")
META_PREFIX = "_hoodie_"  # Hudi's own columns in every table (commit time, record key, ...)
# append-only tables (raw, errors, staging, tombstones, runs): copy-on-write, keyless (no
# index look-up on write), no metadata table (nothing looks keys up in them, and it costs
# seconds per small commit); the lake tables' properties: runtime/catalog.py lake_properties
APPEND_ONLY_PROPERTIES = {"type": "cow", **APPEND_ONLY_WRITE}
# bulk_insert: new files per commit, no index look-up, no rewrite of earlier files
APPEND_OPTIONS = {**HUDI_WRITE_CONF, "hoodie.datasource.write.operation": "bulk_insert",
                  **APPEND_ONLY_WRITE,
                  "hoodie.datasource.write.commitmeta.key.prefix": COMMIT_PREFIX}


BUCKETS = 4  # of a history table
# a Hudi history's write settings, as a bucket-index lake's (runtime/catalog.py bucket_write): each
# key's versions in its hash bucket, no index look-up and no metadata table (whose commit
# beside each small commit cost more than the commit)
BUCKET_WRITE = bucket_write(BUCKETS)


class HudiFormat:
    """``tables.formats.TableFormat`` for Hudi."""

    name = "hudi"

    def create_history(self, spark: SparkSession, table: str, ddl: str) -> None:
        """A history table (steps/history/writer.py): merge-on-read, keyed by (_row_key,
        _ref_key), its versions in hash buckets."""
        where = location(spark, table)
        settings = ", ".join(f"'{k}'='{v}'" for k, v in BUCKET_WRITE.items())
        spark.sql(f"create table {table} ({ddl}) using hudi location '{where}' "
                  "tblproperties (type='mor', primaryKey='_row_key,_ref_key', "
                  "preCombineField='_batch_id', "
                  "'hoodie.record.merge.mode'='COMMIT_TIME_ORDERING', "
                  f"{settings}, 'hoodie.compact.inline'='false')")
        # every later process registers it with them (else: the record index's settings
        # of a keyed table, runtime/catalog.py register), before its first commit
        keep_write_settings(spark, where, BUCKET_WRITE)

    def refresh_schema(self, spark: SparkSession, table: str) -> None:
        refresh_schema(spark, table)

    def exists(self, spark: SparkSession, table: str) -> bool:
        if spark.catalog.tableExists(table):
            return True
        path = location(spark, table)
        if not fs_exists(spark, f"{path}/.hoodie/hoodie.properties"):
            return False
        register(spark, table, path)  # created by another process since this one started
        return True

    def ensure_table(self, spark: SparkSession, table: str,
                     columns: Iterable[tuple[str, str]]) -> None:
        columns = list(columns)
        try:
            exists = self.exists(spark, table)
        except Exception:  # found another process's table half created
            if not self._created_elsewhere(spark, table):
                raise
            exists = True
        if not exists:
            self._create(spark, table, columns)
        for attempt in range(CREATE_RACE_TRIES):
            try:
                self._complete(spark, table, columns)
                return
            except Exception as exc:
                # another process's first commit rewrites hoodie.properties (the metadata
                # table's partitions): for a moment the table reads as "not found"
                if "TableNotFoundException" not in str(exc) or attempt == CREATE_RACE_TRIES - 1:
                    raise
                log.info("Hudi table %s not readable for a moment (another process is "
                         "committing to it): retrying", table)
                time.sleep(CREATE_RACE_WAIT_S)

    def _complete(self, spark: SparkSession, table: str,
                  columns: list[tuple[str, str]]) -> None:
        """A table's first, empty commit if it has none, and the columns it lacks."""
        if _commits(spark, table).countInstants() == 0:
            # Hudi 1.0 takes a file written by an instant older than the table's first
            # completed commit for an archived, so committed, one: a failed first write would
            # become visible once any later write completes. A first, empty commit rules that
            # out (docs/formats.md)
            empty = spark.createDataFrame([], spark.table(table).select(
                *self.payload_columns(spark, table)).schema)
            self.append(empty, table, {})
            log.info("Hudi table %s: first (empty) commit", table)
        schema = spark.table(table).schema
        existing = {f.name for f in schema.fields}
        widen(spark, table, columns, schema)  # a column's type the new rows widen (evolve.py)
        missing = [(n, t) for n, t in columns if n not in existing]
        if missing:
            # a write that failed (a batch stopped mid-read) is rolled back by the next write,
            # but not once an ALTER committed after it ("Found commits after time ..., please
            # rollback greater commits first"): an empty write first rolls it back
            empty = spark.createDataFrame([], spark.table(table).select(
                *self.payload_columns(spark, table)).schema)
            self.append(empty, table, {})
            added = ", ".join(f"`{n}` {t}" for n, t in missing)
            spark.sql(f"alter table {table} add columns ({added})")
            log.info("added columns %s to %s", added, table)

    def _create(self, spark: SparkSession, table: str, columns: list[tuple[str, str]]) -> None:
        refuse_other_format(spark, table, "hudi")
        ddl = ", ".join(f"`{n}` {t}" for n, t in columns)
        props = ", ".join(f"'{k}'='{v}'" for k, v in APPEND_ONLY_PROPERTIES.items())
        try:
            spark.sql(f"create table if not exists {table} ({ddl}) using hudi "
                      f"location '{location(spark, table)}' tblproperties ({props})")
            log.info("created Hudi table %s", table)
        except Exception:
            # another process created it at the same moment (its .hoodie folder half written
            # when this one looked): use theirs once it is complete
            if not self._created_elsewhere(spark, table):
                raise
            log.info("Hudi table %s was created by another process at the same time", table)

    def _created_elsewhere(self, spark: SparkSession, table: str) -> bool:
        """Whether a table another process is creating becomes usable within a few seconds."""
        for _ in range(CREATE_RACE_TRIES):
            time.sleep(CREATE_RACE_WAIT_S)
            try:
                if self.exists(spark, table):
                    return True
            except Exception as exc:  # hoodie.properties still being written
                log.debug("Hudi table %s not readable yet: %s", table, str(exc)[:200])
        return False

    def append(self, df: DataFrame, table: str, properties: Mapping[str, str]) -> None:
        spark = df.sparkSession
        shared = shared_table(table) and not locked_on_s3(spark, table)  # tables/shared.py
        options = {**APPEND_OPTIONS, **(SHARED_WRITE_CONF if shared else {}),
                   "hoodie.table.name": split_name(table)[1],
                   # cleaning after one append in CLEAN_EVERY, not after each: it costs about
                   # 0.3 s of a small commit's 1.3 s (append-only tables keep every file)
                   "hoodie.clean.automatic": str(random.random() < 1 / CLEAN_EVERY).lower()}
        for key, value in properties.items():
            if not key.startswith(COMMIT_PREFIX):
                raise ValueError(f"commit property {key} must start with {COMMIT_PREFIX}")
            options[key] = value
        df.write.format("hudi").options(**options).mode("append").save(location(spark, table))

    def commit_properties(self, spark: SparkSession,
                          table: str) -> Iterator[Mapping[str, str]]:
        """Extra metadata of the completed commits on the active timeline, newest first
        (compaction and clustering commits carry none)."""
        if not self.exists(spark, table):
            return
        timeline = _commits(spark, table)
        instants = timeline.getInstants()
        for i in range(instants.size() - 1, -1, -1):
            metadata = timeline.readCommitMetadata(instants.get(i))
            yield dict(metadata.getExtraMetadata() or {})
        # then the archived ones (archival moves old commits out of the active timeline, and
        # a step that has not committed for a while has its checkpoint only there)
        archived = _meta_client(spark, table).getArchivedTimeline()
        archived.loadCompletedInstantDetailsInMemory()
        instants = archived.getCommitsTimeline().filterCompletedInstants().getInstants()
        for i in range(instants.size() - 1, -1, -1):
            metadata = archived.readCommitMetadata(instants.get(i))
            yield dict(metadata.getExtraMetadata() or {})

    def history_complete(self, spark: SparkSession, table: str) -> bool:
        return True  # commit_properties reads the archived timeline too

    def committing(self, spark: SparkSession, properties: Mapping[str, str],
                   action: Callable[[], T]) -> T:
        """Session settings with the commit prefix become every Hudi commit's metadata while
        ``action`` runs (SQL writes read them like write options)."""
        for key, value in properties.items():
            spark.conf.set(key, value)
        try:
            return action()
        finally:
            for key in properties:
                spark.conf.unset(key)

    def commit_times(self, spark: SparkSession, table: str) -> list[datetime]:
        if not self.exists(spark, table):
            return []
        instants = _commits(spark, table).getInstants()
        return [_instant_time(instants.get(i).getCompletionTime())
                for i in range(instants.size())]

    def payload_columns(self, spark: SparkSession, table: str) -> list[str]:
        return [f.name for f in spark.table(table).schema.fields
                if not f.name.startswith(META_PREFIX)]

    def maintain(self, spark: SparkSession, table: str, merged: bool,
                 keep_commits: int, orphans: bool = False) -> list[str]:
        """Compaction of a merge-on-read lake table (whatever the delta-commit count), then
        cleaning (keep the files of the newest ``keep_commits`` commits) and archival, on any
        table. Neither touches the newest commits, which carry the checkpoints. ``orphans``
        changes nothing: cleaning removes the files of failed writes (rolled back) too."""
        done = []
        if merged:
            compacted = spark.sql(
                f"call run_compaction(op => 'scheduleAndExecute', table => '{table}', "
                "options => 'hoodie.compact.inline.max.delta.commits=1')").collect()
            done.append(f"compacted {len(compacted)} file group plan(s)")
        cleaned = spark.sql(f"call run_clean(table => '{table}', "
                            f"retain_commits => {keep_commits})").collect()
        deleted = sum(int(r["total_files_deleted"] or 0) for r in cleaned)
        done.append(f"cleaned {deleted} file(s) older than the last {keep_commits} commits")
        spark.sql(f"call archive_commits(table => '{table}')").collect()
        done.append("archived old commits")
        return done

    def live_files(self, spark: SparkSession, table: str) -> int:
        """The base files of the newest file slices (what a snapshot read opens)."""
        spark.catalog.refreshTable(table)
        return len(spark.table(table).inputFiles())

    def compact_files(self, spark: SparkSession, table: str) -> None:
        """Clustering: every small file group into one (or more, past the target size),
        sorted by batch; a replace commit without checkpoint properties (readers take them
        from the commit before, as after compaction). The replaced files go with cleaning.
        A clustering an earlier process left pending (killed inside it) is finished first:
        a new plan leaves its file groups out, and a pending instant holds back archival."""
        call = (f"call run_clustering(table => '{table}', op => '{{op}}', order => '_batch_id', "
                f"options => '{CLUSTERING_OPTIONS}')")
        spark.sql(call.format(op="execute")).collect()  # nothing when none is pending
        spark.sql(call.format(op="scheduleAndExecute")).collect()

    def position(self, spark: SparkSession, table: str) -> str | None:
        if not self.exists(spark, table):
            return None
        instants = _commits(spark, table).getInstants()
        if instants.size() == 0:
            return None
        return str(instants.get(instants.size() - 1).getCompletionTime())

    def read_changes(self, spark: SparkSession, table: str, since: str | None,
                     until: str) -> DataFrame:
        """Hudi's incremental query between two completion times (1.0 ranges by completion
        time); where the files of ``since`` were cleaned it falls back to a full scan (the
        caller's ``_batch_id`` filter keeps the result right)."""
        if since is None:
            return spark.table(table)
        return (spark.read.format("hudi")
                .option("hoodie.datasource.query.type", "incremental")
                .option("hoodie.datasource.read.begin.instanttime", since)
                .option("hoodie.datasource.read.end.instanttime", until)
                .option("hoodie.datasource.read.incr.fallback.fulltablescan.enable", "true")
                .load(location(spark, table)))


HUDI = HudiFormat()


def _meta_client(spark: SparkSession, table: str) -> Any:
    jvm = spark._jvm
    assert jvm is not None
    conf = jvm.org.apache.hudi.storage.hadoop.HadoopStorageConfiguration(
        spark._jsc.hadoopConfiguration())
    return (jvm.org.apache.hudi.common.table.HoodieTableMetaClient.builder().setConf(conf)
            .setBasePath(location(spark, table)).build())


def refresh_schema(spark: SparkSession, table: str) -> bool:
    """Give this process's catalog entry of ``table`` the schema its newest commit has on disk,
    when they differ; whether they did. The session catalog is in memory: a table's entry
    keeps the schema it had when this process named it or last altered it, and a column
    another process added since (a plain `dbt run`, a `sluice run`, another runner) is
    missing from it: its SQL then cannot name the column, and adding it again fails
    ("already exists"). A table this process has not named yet is named from disk when first
    used (``exists``): nothing to do."""
    if not spark.catalog.tableExists(table):
        return False
    jvm, session = spark._jvm, spark._jsparkSession
    assert jvm is not None
    found = jvm.org.apache.spark.sql.hudi.HoodieSqlCommonUtils.getTableSqlSchema(
        _meta_client(spark, table), True)
    if found.isEmpty():
        return False  # no commit yet: the entry is what created it
    from pyspark.sql.types import StructType

    catalog = session.sessionState().catalog()
    ident = session.sessionState().sqlParser().parseTableIdentifier(table)
    partitions = set(catalog.getTableMetadata(ident).partitionColumnNames().mkString(",")
                     .split(",")) - {""}
    disk = StructType([f for f in StructType.fromJson(json.loads(found.get().json())).fields
                       if f.name not in partitions])  # the entry's data schema: no partitions
    current = [f for f in spark.table(table).schema.fields if f.name not in partitions]
    if [(f.name.lower(), f.dataType.simpleString()) for f in disk.fields] == \
            [(f.name.lower(), f.dataType.simpleString()) for f in current]:
        return False
    catalog.alterTableDataSchema(ident, jvm.org.apache.spark.sql.types.DataType.fromJson(
        disk.json()))
    spark.catalog.refreshTable(table)
    forget(table)  # the types tables/evolve.py last saw of it
    log.info("table %s: this process's catalog entry took the schema on disk (another process "
             "changed it): %s", table, ", ".join(disk.fieldNames()))
    return True


def _commits(spark: SparkSession, table: str) -> Any:
    return _meta_client(spark, table).getCommitsTimeline().filterCompletedInstants()


def _instant_time(text: str) -> datetime:
    """A Hudi instant time (yyyyMMddHHmmssSSS, local time), naive like pyspark's timestamps."""
    return datetime.strptime(text[:17], "%Y%m%d%H%M%S%f")
