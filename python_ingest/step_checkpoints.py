"""Checkpoints of the pipeline's steps after ingestion (fork, merge).

Like the raw table's checkpoint, a step's checkpoint is a snapshot summary property written by
the same Iceberg commit as the rows it covers: ``sluice.<step>.batch_id`` = the last raw batch
the step has written into that table. Reading it walks the table's current snapshot ancestry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from python_ingest.tables import table_exists

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def property_name(step: str) -> str:
    return f"sluice.{step}.batch_id"


def step_checkpoint(spark: SparkSession, table: str, step: str) -> int:
    """The last batch ``step`` committed into ``table`` (0 when none or no table)."""
    if not table_exists(spark, table):
        return 0
    key = property_name(step)
    rows = spark.sql(
        f"select max(cast(s.summary['{key}'] as bigint)) as batch_id "
        f"from {table}.history h join {table}.snapshots s on h.snapshot_id = s.snapshot_id "
        f"where h.is_current_ancestor and s.summary['{key}'] is not null"
    ).collect()
    value = rows[0]["batch_id"] if rows else None
    return int(value) if value is not None else 0


def write_options(step: str, batch_id: int) -> dict[str, str]:
    """DataFrame write options that commit ``step``'s checkpoint with the rows."""
    return {f"snapshot-property.{property_name(step)}": str(batch_id)}
