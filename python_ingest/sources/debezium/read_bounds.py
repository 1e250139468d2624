"""A Debezium job's snapshot-read bounds per partition, for PostgreSQL changes far before
the commit streamed before theirs (changelog/debezium_ordering.py, ``ReadBound``).

A read task checks such a change against the largest bound of a snapshot read that carries a
``last`` (incremental and blocking snapshots) landed before it in its partition. The raw
table holds them: a read's ref key is its bound shifted, with order 0, and no streamed change
has order 0 (``from_raw``, one aggregate over the table, run when a change first needs it).
The process keeps what it found per job and adds each committed batch's reads, which the
tasks report (``remember``); an entry speaks only for the raw checkpoint it was made at, so a
batch committed elsewhere, a restart or a job started over finds it again from the table.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from python_ingest.changelog.debezium_ordering import PG_SHIFT

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from python_ingest.tables.checkpoints import Checkpoint

_lock = threading.Lock()
_known: dict[str, tuple[tuple[object, ...], dict[int, int]]] = {}


def _mark(checkpoint: Checkpoint | None) -> tuple[object, ...]:
    if checkpoint is None:
        return ()
    return (checkpoint.batch_id, tuple(sorted(checkpoint.offsets.items())))


def known(job: str, checkpoint: Checkpoint | None) -> dict[int, int] | None:
    """The job's bounds as of its raw table's last commit (``checkpoint``); None when this
    process has not found them at that commit. A job without a checkpoint has none."""
    if checkpoint is None:
        return {}
    with _lock:
        entry = _known.get(job)
    if entry is None or entry[0] != _mark(checkpoint):
        return None
    return dict(entry[1])


def remember(job: str, checkpoint: Checkpoint, bounds: dict[int, int]) -> None:
    """The job's bounds as of the raw commit ``checkpoint``."""
    with _lock:
        _known[job] = (_mark(checkpoint), dict(bounds))


def merged(before: dict[int, int], added: dict[int, int]) -> dict[int, int]:
    """Largest bound per partition of both (a new dict)."""
    both = dict(before)
    for partition, bound in added.items():
        both[partition] = max(bound, both.get(partition, 0))
    return both


def from_raw(spark: SparkSession, raw_table: str) -> dict[int, int]:
    """The largest snapshot-read bound per Kafka partition among the raw table's rows."""
    from pyspark.sql import functions as F  # noqa: N812

    from python_ingest.tables.formats import read_table

    mask = (1 << PG_SHIFT) - 1
    rows = (read_table(spark, raw_table)
            .where((F.col("_source") == "postgresql") & (F.col("_ref_key") > 0)
                   & ((F.col("_ref_key").bitwiseAND(F.lit(mask))) == 0))
            .groupBy("_kafka_partition")
            .agg(F.max(F.shiftright("_ref_key", PG_SHIFT)).alias("bound"))
            .collect())
    return {int(r["_kafka_partition"]): int(r["bound"]) for r in rows}
