"""What changed in a lake table between two positions: the rows to upsert and the keys to
delete, one row per row key (docs/dispersal.md, "Which rows").

A position is the lake's commit (``tables.formats.position``: Hudi completion time, Iceberg
snapshot id) together with the merge checkpoint it carries (``sluice.merge.batch_id``), so
that a rerun can say exactly which batches a target already holds:

- upserts: the format's incremental read from the old commit to the new one, narrowed to
  ``_batch_id`` in (old batch, new batch] (every merge sets ``_batch_id`` on the rows it
  writes, so the narrowing is exact whatever the read returns beyond the range);
- deletes: the lake drops deleted rows, the merge records each delete as an entry of the
  global index ``meta.<job>__index`` (row key, ref key, ``_is_deleted``, batch; docs/index.md),
  committed before the lake's MERGE; the delete entries of the same batch range name the keys
  deleted since (index compaction keeps each key's newest entry, and a delete marker for the
  job's ``tombstone_retention``: a target that falls further behind misses deletes);
- a key in both: the later batch wins (deleted in 3 and re-inserted in 5 is an upsert; written
  in 3 and deleted in 5, however the incremental read shows it, is a delete).

No position yet: the whole table as of the new position (a full copy).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from python_ingest.exceptions import DispersalError
from python_ingest.tables.checkpoints import step_checkpoint
from python_ingest.tables.formats import position, read_changes, read_table, table_exists
from python_ingest.tables.names import JobTables

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

MERGE_STEP = "merge"  # the step whose checkpoint lake commits carry (steps/pipeline.py)
OP = "_sluice_op"  # the change set's action column: UPSERT or DELETE
UPSERT, DELETE = "u", "d"
LEFT_OUT = ("_is_deleted",)  # lake columns a target does not get (always false there)


@dataclass(frozen=True)
class Position:
    """How far a target holds the lake: its commit and the last merged batch in it."""

    commit: str
    batch_id: int

    def describe(self) -> str:
        return f"batch {self.batch_id} (commit {self.commit})"


def lake_table(tables: JobTables) -> str:
    """The job's lake table, or a DispersalError saying there is none to disperse."""
    if tables.lake is None:
        raise DispersalError(f"job {tables.job} has no lake model (a dbt model materialized "
                             "lake_merge), so there is nothing to disperse; add one or remove "
                             f"the job's dispersal section")
    return tables.lake


def lake_position(spark: SparkSession, tables: JobTables) -> Position | None:
    """Where the lake table stands now (None: not created or never merged)."""
    table = lake_table(tables)
    if not table_exists(spark, table):
        return None
    commit = position(spark, table)
    if commit is None:
        return None
    return Position(commit, step_checkpoint(spark, table, MERGE_STEP))


def target_columns(spark: SparkSession, tables: JobTables) -> list[tuple[str, str]]:
    """The columns a target gets, (name, Spark type), in the lake's order: every lake column
    but the format's own and ``LEFT_OUT``."""
    df = lake_frame(spark, tables)
    return [(f.name, f.dataType.simpleString()) for f in df.schema.fields
            if f.name not in LEFT_OUT]


def lake_frame(spark: SparkSession, tables: JobTables) -> DataFrame:
    """The lake table with its own columns (for its schema: no rows are read)."""
    return read_table(spark, lake_table(tables))


def changes(spark: SparkSession, tables: JobTables, since: Position | None,
            until: Position) -> DataFrame:
    """The change set from ``since`` to ``until``: column ``_sluice_op`` (UPSERT or DELETE),
    then the target columns (null but ``_row_key`` for a delete); one row per row key."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    table = lake_table(tables)
    rows = read_changes(spark, table, since.commit if since else None, until.commit)
    rows = rows.where(F.col("_batch_id") <= until.batch_id)
    if since is not None:
        rows = rows.where(F.col("_batch_id") > since.batch_id)
    columns = [name for name, _ in target_columns(spark, tables)]
    if since is None:  # a full copy: the live rows (keep_tombstones lakes keep deleted ones)
        live = rows.where(~F.coalesce(F.col("_is_deleted"), F.lit(False)))
        return live.select(F.lit(UPSERT).alias(OP), *[F.col(f"`{c}`") for c in columns])
    # an incremental read returns each key once; should one return versions, the newest wins
    newest = Window.partitionBy("_row_key").orderBy(F.col("_batch_id").desc())
    rows = (rows.withColumn("_sluice_copy", F.row_number().over(newest))
            .where("_sluice_copy = 1").drop("_sluice_copy"))
    deletes = (spark.table(tables.index)
               .where(F.col("_is_deleted") & (F.col("_batch_id") > since.batch_id)
                      & (F.col("_batch_id") <= until.batch_id))
               .groupBy("_row_key").agg(F.max("_batch_id").alias("_deleted_batch"))
               .withColumnRenamed("_row_key", "_deleted_key")) \
        if table_exists(spark, tables.index) else None
    row = rows.alias("row")
    if deletes is None:
        joined = row.withColumn("_deleted_key", F.lit(None).cast("string")) \
            .withColumn("_deleted_batch", F.lit(None).cast("bigint"))
    else:
        joined = row.join(deletes, F.col("row._row_key") == F.col("_deleted_key"), "full_outer")
    is_delete = (F.col("row._row_key").isNull()
                 | F.coalesce(F.col("row._is_deleted"), F.lit(False))
                 | (F.col("_deleted_batch") >= F.col("row._batch_id")))
    key = F.coalesce(F.col("row._row_key"), F.col("_deleted_key"))
    selected = [F.when(is_delete, F.lit(DELETE)).otherwise(F.lit(UPSERT)).alias(OP)]
    for name in columns:
        value = key if name == "_row_key" else \
            F.when(is_delete, F.lit(None)).otherwise(F.col(f"row.`{name}`"))
        selected.append(value.alias(name))
    return joined.select(*selected)
