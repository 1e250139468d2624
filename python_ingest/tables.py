"""Iceberg tables sluice writes, and checkpoints stored in their snapshots.

A checkpoint is a snapshot summary property of the table it belongs to, written by the same
commit as the rows it covers: data and checkpoint move together or not at all. Reading it back
walks the table's current snapshot ancestry, newest first, to the last snapshot carrying it
(maintenance commits such as compaction carry none; an expired parent ends the walk).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from python_ingest.exceptions import CheckpointLostError
from python_ingest.workunits import Checkpoint

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

CHECKPOINT_PROPERTY = "sluice.checkpoint"
TABLE_PROPERTIES = {
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
}


def table_exists(spark: SparkSession, table: str) -> bool:
    return bool(spark.catalog.tableExists(table))


def ensure_table(spark: SparkSession, table: str, columns: Iterable[tuple[str, str]]) -> None:
    """Create the table, or add columns that the schema gained since (never drops any)."""
    columns = list(columns)
    if not table_exists(spark, table):
        ddl = ", ".join(f"`{n}` {t}" for n, t in columns)
        props = ", ".join(f"'{k}'='{v}'" for k, v in TABLE_PROPERTIES.items())
        spark.sql(f"create table if not exists {table} ({ddl}) using iceberg "
                  f"tblproperties ({props})")
        log.info("created table %s", table)
        return
    existing = {f.name for f in spark.table(table).schema.fields}
    for name, spark_type in columns:
        if name not in existing:
            spark.sql(f"alter table {table} add column `{name}` {spark_type}")
            log.info("added column %s %s to %s", name, spark_type, table)


def read_checkpoint(spark: SparkSession, table: str) -> Checkpoint | None:
    """The checkpoint of the newest snapshot in the table's current history that has one.

    Walks the snapshot parents with Iceberg's Java API: milliseconds, where a query on the
    metadata tables costs a Spark job.
    """
    if not table_exists(spark, table):
        return None
    iceberg = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(  # type: ignore[union-attr]
        spark._jsparkSession, table)
    current = snapshot = iceberg.currentSnapshot()
    while snapshot is not None:
        text = snapshot.summary().get(CHECKPOINT_PROPERTY)
        if text is not None:
            return Checkpoint.from_json(text)
        parent = snapshot.parentId()
        snapshot = iceberg.snapshot(parent) if parent is not None else None
    if current is not None and int(current.summary().get("total-records") or 0) > 0:
        raise CheckpointLostError(table)  # starting over would duplicate every row
    return None


def append_with_checkpoint(df: DataFrame, table: str, checkpoint: Checkpoint,
                           properties: Mapping[str, str] | None = None) -> None:
    """Append ``df`` and record ``checkpoint`` in the same Iceberg commit."""
    writer = df.writeTo(table).option(f"snapshot-property.{CHECKPOINT_PROPERTY}",
                                      checkpoint.to_json())
    for key, value in (properties or {}).items():
        writer = writer.option(f"snapshot-property.{key}", value)
    writer.append()
