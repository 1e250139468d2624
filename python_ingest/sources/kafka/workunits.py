"""Work units (Marmaray's WorkUnitCalculator): what one run reads, from a checkpoint.

Pure functions over offsets, so the planning rules (start positions, data-loss and reset
checks, fair throttling, splitting into tasks) are tested without a broker.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from python_ingest.exceptions import DataLossError, OffsetResetError
from python_ingest.kafka.client import PartitionOffsets
from python_ingest.tables.checkpoints import Checkpoint


@dataclass(frozen=True)
class WorkUnit:
    """Offsets [start, end) of one partition, read by one Spark task."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class DataLoss:
    """Offsets that were gone when the run started and were skipped by policy."""

    partition: int
    start: int
    end: int


@dataclass(frozen=True)
class Plan:
    """One run's work: the tasks to read and the checkpoint that commits with their data."""

    units: tuple[WorkUnit, ...]
    start: Mapping[int, int]
    next_offsets: Mapping[int, int]
    lag: Mapping[int, int]
    data_loss: tuple[DataLoss, ...] = ()
    topic_id: str | None = None  # the topic's id when planned (stored in the new checkpoint)

    @property
    def planned(self) -> int:
        return sum(u.size for u in self.units)

    @property
    def remaining(self) -> int:
        """Messages left for later runs after this one."""
        return sum(self.lag.values()) - self.planned


def start_positions(topic: str, offsets: Sequence[PartitionOffsets],
                    checkpoint: Checkpoint | None, starting: str,
                    accept_data_loss: bool) -> tuple[dict[int, int], tuple[DataLoss, ...]]:
    """Where each partition's read starts, checking the checkpoint against the broker."""
    positions: dict[int, int] = {}
    losses = []
    for po in offsets:
        if checkpoint is None:
            positions[po.partition] = po.earliest if starting == "earliest" else po.end
            continue
        if po.partition not in checkpoint.offsets:
            positions[po.partition] = po.earliest  # a partition added since: read it all
            continue
        at = checkpoint.offsets[po.partition]
        if at > po.end:
            raise OffsetResetError(topic, po.partition, at, po.end)
        if at < po.earliest:
            if not accept_data_loss:
                raise DataLossError(topic, po.partition, at, po.earliest)
            losses.append(DataLoss(po.partition, at, po.earliest))
            at = po.earliest
        positions[po.partition] = at
    return positions, tuple(losses)


def fair_shares(lags: Mapping[int, int], budget: int) -> dict[int, int]:
    """Split ``budget`` records across partitions fairly (water-filling).

    Partitions with little lag take all of it; what they leave is shared by the others.
    """
    shares: dict[int, int] = {}
    remaining = budget
    ordered = sorted(lags.items(), key=lambda item: (item[1], item[0]))
    for i, (partition, lag) in enumerate(ordered):
        share = math.ceil(remaining / (len(ordered) - i)) if remaining > 0 else 0
        take = min(lag, share)
        shares[partition] = take
        remaining -= take
    return shares


def split(unit: WorkUnit, records_per_task: int) -> list[WorkUnit]:
    """Split a partition's range into tasks of at most ``records_per_task`` offsets."""
    pieces = max(1, math.ceil(unit.size / records_per_task))
    step = math.ceil(unit.size / pieces)
    return [WorkUnit(unit.topic, unit.partition, s, min(unit.end, s + step))
            for s in range(unit.start, unit.end, step)]


def plan(topic: str, offsets: Sequence[PartitionOffsets], positions: Mapping[int, int],
         max_records: int, max_bytes: int, bytes_per_message: float | None,
         records_per_task: int, data_loss: tuple[DataLoss, ...] = ()) -> Plan:
    """The work units of one run, throttled by max records and (estimated) max bytes."""
    ends = {po.partition: po.end for po in offsets}
    lag = {p: max(0, ends[p] - positions[p]) for p in positions}
    budget = max_records
    if bytes_per_message:
        budget = min(budget, max(1, int(max_bytes // bytes_per_message)))
    shares = fair_shares(lag, budget)
    units: list[WorkUnit] = []
    for partition in sorted(shares):
        if shares[partition] > 0:
            whole = WorkUnit(topic, partition, positions[partition],
                             positions[partition] + shares[partition])
            units.extend(split(whole, records_per_task))
    next_offsets = {p: positions[p] + shares.get(p, 0) for p in positions}
    return Plan(units=tuple(units), start=dict(positions), next_offsets=next_offsets, lag=lag,
                data_loss=data_loss)
