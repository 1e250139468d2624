"""The global index of a job, held in the process's memory between its batches.

The batch path's small batches (steps/merge/changeset.py) need each key's state before the batch:
its newest index entry (ref key, deleted). Reading ``meta.<job>__index`` for it is a Hudi
scan and a Spark job per batch; a runner runs the same job batch after batch, so the index is
read once (one row per key: the newest entry) and kept, and each batch's own entries are added
after its commit: the lake commit that carries them (steps/merge/index.py: a small batch's entries
reach the index table later, several batches at a time) or the index commit of a batch the
lake model's SQL merged.

It stays exact because it is checked, not trusted: an entry set is valid only while the
index table's history ends where it ended when the set was last brought up to date (its
position: Hudi's newest completed commit). Any other commit (index compaction by the services
thread, a rebuild, ``sluice maintain`` from another process, another runner that took the job
over) moves the position, and the next batch reads the index again. A batch the index already
holds entries of (a rerun after a kill between the index and the lake commit) is not served
from memory. An index of more than ``MAX_KEYS`` keys is not held (about 150 bytes a key in
Python): such jobs read the index per batch, in SQL. All the indexes one process holds keep
at most ``TOTAL_KEYS`` keys together: past it the least recently used are dropped, to be read
again when their jobs next run.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from python_ingest.runtime.budget import over_budget
from python_ingest.steps.merge.changeset import KeyState
from python_ingest.steps.merge.index import catch_up
from python_ingest.tables.formats import position
from python_ingest.tables.lease import check_held

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from python_ingest.tables.names import JobTables

log = logging.getLogger(__name__)

MAX_KEYS = int(os.environ.get("SLUICE_INDEX_CACHE_KEYS", "2000000"))
# the keys of every index held in one process: a runner of hundreds of jobs holds the indexes
# of the jobs that ran last; the others are read again when their jobs next run
TOTAL_KEYS = int(os.environ.get("SLUICE_INDEX_CACHE_TOTAL_KEYS", "4000000"))


@dataclass
class _Held:
    position: str | None
    through_batch: int  # the newest batch whose entries it has
    states: dict[str, KeyState] = field(default_factory=dict)
    unindexed: int = 0  # batches whose entries only the lake's commits carry yet
    used: float = field(default_factory=time.monotonic)


_held: dict[str, _Held] = {}
_lock = threading.Lock()


def states(spark: SparkSession, tables: JobTables, batch_id: int
           ) -> dict[str, KeyState] | None:
    """Every key's state before ``batch_id`` (the index's newest entry of earlier batches),
    from memory when the index has not moved; None when it is not held (too many keys, or
    the index has entries of ``batch_id`` or later). Read again, the index table first takes
    the entries only the lake's commits carry (``bring_up``)."""
    index = tables.index
    now = position(spark, index)
    with _lock:
        held = _held.get(index)
    if held is None or held.position != now:
        bring_up(spark, tables)
        now = position(spark, index)
        held = _load(spark, index, now)
        with _lock:
            if held is None:
                _held.pop(index, None)
                return None
            _held[index] = held
    held.used = time.monotonic()
    _evict(index)
    if held.through_batch >= batch_id:
        return None
    return held.states


def _evict(keep: str) -> None:
    """Drop the least recently used indexes but ``keep`` while all held hold more than
    ``TOTAL_KEYS`` keys. Safe whenever: what was held is in the index table or in the lake's
    commits (``bring_up`` writes those before the index is read again)."""
    with _lock:
        for index in over_budget(_held, lambda h: len(h.states), lambda h: h.used, TOTAL_KEYS,
                                 keep):
            held = _held.pop(index)
            log.info("index %s no longer held in memory (%d keys): the indexes held "
                     "exceed %d keys (SLUICE_INDEX_CACHE_TOTAL_KEYS)", index,
                     len(held.states), TOTAL_KEYS)


def _load(spark: SparkSession, index: str, now: str | None) -> _Held | None:
    start = time.monotonic()
    rows = spark.sql(f"""
        select _row_key, latest._ref_key, latest._is_deleted, latest._batch_id
        from (
            select _row_key, max_by(struct(_ref_key, _is_deleted, _batch_id), _batch_id)
                as latest
            from {index}
            group by _row_key
        )
        limit {MAX_KEYS + 1}""").collect()
    if len(rows) > MAX_KEYS:
        log.info("index %s has more than %d keys: not held in memory (its batches read it "
                 "in SQL)", index, MAX_KEYS)
        return None
    held = _Held(now, max((int(r[3]) for r in rows), default=0),
                 {r[0]: KeyState(int(r[1]), not r[2]) for r in rows})
    log.info("index %s read into memory: %d keys in %.2f s", index, len(rows),
             time.monotonic() - start)
    return held


def holds(spark: SparkSession, index: str) -> bool:
    """Whether ``index`` is held and has not moved since (a batch that did not fold on the
    driver may then bring its entries, cheaper than reading the whole index again)."""
    with _lock:
        held = _held.get(index)
    return held is not None and held.position == position(spark, index)


def committed(spark: SparkSession, index: str, batch_id: int,
              entries: Iterable[tuple[str, int, bool]]) -> None:
    """``batch_id``'s entries (row key, ref key, deleted) were committed to ``index``: the
    held states take them, and the index's new position."""
    now = position(spark, index)
    with _lock:
        held = _took(index, batch_id, entries)
        if held is not None:
            held.position = now


def lake_committed(index: str, batch_id: int, entries: Iterable[tuple[str, int, bool]]
                   ) -> None:
    """``batch_id``'s entries were committed with its lake commit (steps/merge/index.py
    ``entries_property``), not to ``index``: the held states take them; the index table, and
    so the position, stay as they were until ``caught_up``."""
    with _lock:
        held = _took(index, batch_id, entries)
        if held is not None:
            held.unindexed += 1


def _took(index: str, batch_id: int, entries: Iterable[tuple[str, int, bool]]
          ) -> _Held | None:
    """The held states of ``index`` with ``batch_id``'s entries (under ``_lock``); None, and
    nothing held, when it is not held or already has that batch (a rerun)."""
    held = _held.get(index)
    if held is None or held.through_batch >= batch_id:
        _held.pop(index, None)
        return None
    for row_key, ref_key, is_deleted in entries:
        held.states[row_key] = KeyState(ref_key, not is_deleted)
    held.through_batch = batch_id
    return held


def unindexed(index: str) -> int:
    """How many batches held for ``index`` have their entries only in lake commits."""
    with _lock:
        held = _held.get(index)
    return held.unindexed if held is not None else 0


def complete(spark: SparkSession, tables: JobTables) -> None:
    """Make the index table hold every entry the lake has merged, before something reads it
    (the lake model's SQL) or writes a checkpoint past them: nothing to do when the held
    index has no batch of its own and is at the table's position."""
    with _lock:
        held = _held.get(tables.index)
    if held is None or held.unindexed or held.position != position(spark, tables.index):
        bring_up(spark, tables)


def bring_up(spark: SparkSession, tables: JobTables) -> None:
    """The index table brought up to the lake (steps/merge/index.py ``catch_up``), under the job's
    lease; what is held of it stays valid."""
    before = position(spark, tables.index)
    check_held(tables.job)
    if catch_up(spark, tables):
        _caught_up(spark, tables.index, before)


def _caught_up(spark: SparkSession, index: str, before: str | None) -> None:
    """``index`` took the entries the lake's commits carried, moving from position
    ``before``: what is held stays valid at the new position."""
    now = position(spark, index)
    with _lock:
        held = _held.get(index)
        if held is None:
            return
        if held.position != before:
            _held.pop(index, None)
            return
        held.position, held.unindexed = now, 0


def forget(index: str) -> None:
    """Drop what is held of ``index`` (a batch wrote it without telling its entries)."""
    with _lock:
        _held.pop(index, None)
