"""Checkpoints: where a job stands, stored in the same commit as the rows they cover.

One vocabulary across sluice (docs/architecture.md, "Checkpoints"):

- **source checkpoint** (``Checkpoint``): where the raw table's source stands: the next
  Kafka offset per partition (a files job: the processed partitions, ``ProcessedPartitions``,
  docs/files-source.md) and the last batch id. A commit property (``sluice.checkpoint``;
  Iceberg: snapshot summary, Hudi: commit metadata) of the raw table's commit that appended
  the batch.
- **step checkpoint** (``step_checkpoint``): the last raw batch a later step (fork, merge)
  committed into its own table: the commit property ``sluice.<step>.batch_id``.
- **tap checkpoint** (``sources.binlog.position.BinlogCheckpoint``): where the binlog tap
  stands in the server's binlog, in a file beside the tap, written after the broker acked.

Reading a checkpoint walks the table's current history (Iceberg: snapshot ancestry, Hudi:
completed commits on the timeline), newest first, to the last commit carrying it (maintenance
commits such as compaction carry none; an expired or archived commit ends the walk): data and
checkpoint move together or not at all.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from python_ingest.exceptions import CheckpointLostError, StepCheckpointLostError
from python_ingest.tables.formats import (
    append,
    commit_properties,
    history_complete,
    table_exists,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

CHECKPOINT_PROPERTY = "sluice.checkpoint"


@dataclass(frozen=True)
class ProcessedPartitions:
    """The partitions of a files job's landing dir that are in the raw table: every key up to
    ``watermark`` (key order), and the keys above it in ``done`` (with when they committed,
    epoch seconds). Keys are partition paths relative to the landing dir.

    ``seen_until``: the newest arrival (inode change time, epoch seconds, on the landing dir's
    own clock) that the listing behind the watermark saw: a partition at or below the
    watermark that arrived later was never seen, let alone taken: it is *late*, skipped and
    reported; ``late`` holds the late keys found so far (docs/files-source.md)."""

    watermark: str | None = None
    done: Mapping[str, float] = field(default_factory=dict)
    batch: tuple[str, ...] = ()  # the keys of the last batch (its error rows, if lost, re-read)
    seen_until: float | None = None
    late: tuple[str, ...] = ()

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and (key in self.done or self.below_watermark(key))

    def below_watermark(self, key: str) -> bool:
        return self.watermark is not None and key <= self.watermark

    def adding(self, keys: Iterable[str], at: float) -> ProcessedPartitions:
        """These partitions as the new batch, committed ``at`` (epoch seconds)."""
        batch = tuple(sorted(keys))
        return replace(self, done={**self.done, **{k: at for k in batch}}, batch=batch)

    def with_late(self, keys: Iterable[str]) -> ProcessedPartitions:
        """These late partitions recorded too (skipped: below the watermark)."""
        return replace(self, late=tuple(sorted({*self.late, *keys})))

    def compacted(self, pending: Iterable[str], now: float, lateness_s: float,
                  seen_until: float | None = None) -> ProcessedPartitions:
        """Fold the oldest done keys into the watermark: those committed more than
        ``lateness_s`` ago with no unprocessed partition (``pending``) at or below them.
        ``seen_until``: the newest arrival the listing that found ``pending`` saw; once the
        watermark moves, a partition below it that arrived after that is late."""
        first_pending = min(pending, default=None)
        watermark = self.watermark
        for key in sorted(self.done):
            if self.done[key] > now - lateness_s or (first_pending is not None
                                                     and first_pending <= key):
                break
            watermark = key
        if watermark == self.watermark:  # the caller recorded the late keys its listing saw
            seen = max((t for t in (self.seen_until, seen_until) if t is not None), default=None)
            return replace(self, seen_until=seen)
        return ProcessedPartitions(watermark, {k: t for k, t in self.done.items()
                                               if watermark is None or k > watermark},
                                   self.batch, seen_until, self.late)

    def to_dict(self) -> dict[str, object]:
        return {"watermark": self.watermark, "done": dict(sorted(self.done.items())),
                "batch": list(self.batch), "seen_until": self.seen_until,
                "late": list(self.late)}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> ProcessedPartitions:
        done = data.get("done") or {}
        batch = data.get("batch") or []
        late = data.get("late") or []
        seen = data.get("seen_until")
        assert isinstance(done, Mapping) and isinstance(batch, list) and isinstance(late, list)
        assert seen is None or isinstance(seen, int | float)
        watermark = data.get("watermark")
        return cls(None if watermark is None else str(watermark),
                   {str(k): float(v) for k, v in done.items()}, tuple(map(str, batch)),
                   None if seen is None else float(seen), tuple(map(str, late)))


@dataclass(frozen=True)
class Checkpoint:
    """Where a job stands: the next offset to read per partition, and the last batch id."""

    topic: str
    offsets: Mapping[int, int] = field(default_factory=dict)
    batch_id: int = 0
    bytes_per_message: float | None = None
    batch_start: Mapping[int, int] = field(default_factory=dict)  # where this batch began
    topic_id: str | None = None  # the broker's id of the topic (KIP-516): a recreated topic differs
    # how the raw rows' _row_key was made (config ROW_KEY_ENCODINGS); None: before it was
    # recorded, i.e. joined (issue #9.7)
    row_key_encoding: str | None = None
    # a files job (source: files): its processed partitions; offsets and topic stay empty
    files: ProcessedPartitions | None = None

    def to_json(self) -> str:
        files = {} if self.files is None else {"files": self.files.to_dict()}
        return json.dumps({**files, "topic": self.topic, "batch_id": self.batch_id,
                           "offsets": {str(p): o for p, o in sorted(self.offsets.items())},
                           "batch_start": {str(p): o for p, o in sorted(self.batch_start.items())},
                           "bytes_per_message": self.bytes_per_message,
                           "topic_id": self.topic_id,
                           "row_key_encoding": self.row_key_encoding}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Checkpoint:
        data = json.loads(text)
        return cls(topic=data["topic"], batch_id=int(data["batch_id"]),
                   offsets={int(p): int(o) for p, o in data["offsets"].items()},
                   bytes_per_message=data.get("bytes_per_message"),
                   batch_start={int(p): int(o) for p, o in data.get("batch_start", {}).items()},
                   topic_id=data.get("topic_id"),
                   row_key_encoding=data.get("row_key_encoding"),
                   files=ProcessedPartitions.from_dict(data["files"]) if "files" in data
                   else None)


def read_checkpoint(spark: SparkSession, table: str) -> Checkpoint | None:
    """The checkpoint of the newest commit in the table's current history that has one."""
    if not table_exists(spark, table):
        return None
    for properties in commit_properties(spark, table):
        text = properties.get(CHECKPOINT_PROPERTY)
        if text is not None:
            return Checkpoint.from_json(text)
    if spark.table(table).limit(1).count() > 0:
        raise CheckpointLostError(table)  # starting over would duplicate every row
    return None


def append_with_checkpoint(df: DataFrame, table: str, checkpoint: Checkpoint,
                           properties: Mapping[str, str] | None = None) -> None:
    """Append ``df`` and record ``checkpoint`` in the same commit."""
    append(df, table, {CHECKPOINT_PROPERTY: checkpoint.to_json(), **(properties or {})})


def property_name(step: str) -> str:
    return f"sluice.{step}.batch_id"


def step_checkpoint(spark: SparkSession, table: str, step: str) -> int:
    """The last batch ``step`` committed into ``table`` (0 when none or no table)."""
    if not table_exists(spark, table):
        return 0
    key = property_name(step)
    for properties in commit_properties(spark, table):
        if key in properties:
            return int(properties[key])
    if not history_complete(spark, table):
        raise StepCheckpointLostError(table, step)  # 0 would re-run the step from the start
    return 0


def step_properties(step: str, batch_id: int) -> dict[str, str]:
    """Commit properties that record ``step``'s checkpoint with the rows."""
    return {property_name(step): str(batch_id)}
