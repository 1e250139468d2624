"""Checkpoints: where a job stands, stored in the same commit as the rows they cover.

One vocabulary across sluice (docs/architecture.md, "Checkpoints"):

- **source checkpoint** (``Checkpoint``): where the raw table's source stands: the next
  Kafka offset per partition and the last batch id. A snapshot summary property
  (``sluice.checkpoint``) of the raw table's commit that appended the batch.
- **step checkpoint** (``step_checkpoint``): the last raw batch a later step (fork, merge)
  committed into its own table: the summary property ``sluice.<step>.batch_id``.
- **tap checkpoint** (``sources.binlog.position.BinlogCheckpoint``): where the binlog tap
  stands in the server's binlog, in a file beside the tap, written after the broker acked.

Reading a checkpoint walks the table's current snapshot ancestry, newest first, to the last
snapshot carrying it (maintenance commits such as compaction carry none; an expired parent
ends the walk): data and checkpoint move together or not at all.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from python_ingest.exceptions import CheckpointLostError
from python_ingest.tables.iceberg import table_exists

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

CHECKPOINT_PROPERTY = "sluice.checkpoint"


@dataclass(frozen=True)
class Checkpoint:
    """Where a job stands: the next offset to read per partition, and the last batch id."""

    topic: str
    offsets: Mapping[int, int] = field(default_factory=dict)
    batch_id: int = 0
    bytes_per_message: float | None = None
    batch_start: Mapping[int, int] = field(default_factory=dict)  # where this batch began
    topic_id: str | None = None  # the broker's id of the topic (KIP-516): a recreated topic differs

    def to_json(self) -> str:
        return json.dumps({"topic": self.topic, "batch_id": self.batch_id,
                           "offsets": {str(p): o for p, o in sorted(self.offsets.items())},
                           "batch_start": {str(p): o for p, o in sorted(self.batch_start.items())},
                           "bytes_per_message": self.bytes_per_message,
                           "topic_id": self.topic_id}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Checkpoint:
        data = json.loads(text)
        return cls(topic=data["topic"], batch_id=int(data["batch_id"]),
                   offsets={int(p): int(o) for p, o in data["offsets"].items()},
                   bytes_per_message=data.get("bytes_per_message"),
                   batch_start={int(p): int(o) for p, o in data.get("batch_start", {}).items()},
                   topic_id=data.get("topic_id"))


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
