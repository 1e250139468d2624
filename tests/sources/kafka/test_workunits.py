"""Work-unit planning: start positions, data-loss and reset checks, fair throttling, splits."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from python_ingest.exceptions import DataLossError, OffsetResetError
from python_ingest.kafka.client import PartitionOffsets
from python_ingest.sources.kafka.workunits import (
    WorkUnit,
    fair_shares,
    plan,
    split,
    start_positions,
)
from python_ingest.tables.checkpoints import Checkpoint

OFFSETS = [PartitionOffsets(0, 0, 100), PartitionOffsets(1, 10, 50), PartitionOffsets(2, 0, 0)]


def test_first_run_starts_at_earliest_or_latest() -> None:
    assert start_positions("t", OFFSETS, None, "earliest", False)[0] == {0: 0, 1: 10, 2: 0}
    assert start_positions("t", OFFSETS, None, "latest", False)[0] == {0: 100, 1: 50, 2: 0}


def test_checkpoint_positions_and_new_partitions_from_earliest() -> None:
    checkpoint = Checkpoint("t", {0: 40, 1: 20}, batch_id=3)
    positions, losses = start_positions("t", OFFSETS, checkpoint, "latest", False)
    assert positions == {0: 40, 1: 20, 2: 0}
    assert losses == ()


def test_checkpoint_below_earliest_is_data_loss_naming_topic_partition_and_range() -> None:
    checkpoint = Checkpoint("trips", {0: 40, 1: 4})
    with pytest.raises(DataLossError) as err:
        start_positions("trips", OFFSETS, checkpoint, "earliest", False)
    message = str(err.value)
    assert "'trips' partition 1" in message and "4..9" in message
    assert "on_data_loss: accept" in message and "--accept-data-loss" in message


def test_accepted_data_loss_continues_at_earliest_and_reports_the_gap() -> None:
    checkpoint = Checkpoint("trips", {0: 40, 1: 4})
    positions, losses = start_positions("trips", OFFSETS, checkpoint, "earliest", True)
    assert positions[1] == 10
    assert [(loss.partition, loss.start, loss.end) for loss in losses] == [(1, 4, 10)]


def test_checkpoint_beyond_end_is_a_reset_error() -> None:
    with pytest.raises(OffsetResetError, match="partition 0.*recreated"):
        start_positions("t", OFFSETS, Checkpoint("t", {0: 101}), "earliest", False)


def test_fair_shares_give_small_partitions_all_and_split_the_rest() -> None:
    assert fair_shares({0: 5, 1: 100, 2: 100}, 105) == {0: 5, 1: 50, 2: 50}
    assert fair_shares({0: 5, 1: 100}, 1000) == {0: 5, 1: 100}
    assert fair_shares({0: 10, 1: 10}, 0) == {0: 0, 1: 0}


@given(st.dictionaries(st.integers(0, 20), st.integers(0, 10_000), max_size=12),
       st.integers(0, 50_000))
def test_fair_shares_never_exceed_budget_or_lag_and_use_what_they_can(
        lags: dict[int, int], budget: int) -> None:
    shares = fair_shares(lags, budget)
    assert set(shares) == set(lags)
    assert all(0 <= shares[p] <= lags[p] for p in lags)
    assert sum(shares.values()) == min(budget, sum(lags.values()))


@given(st.integers(0, 1000), st.integers(1, 5000), st.integers(1, 700))
def test_split_covers_the_range_exactly_in_bounded_pieces(start: int, size: int, per: int) -> None:
    pieces = split(WorkUnit("t", 0, start, start + size), per)
    assert pieces[0].start == start and pieces[-1].end == start + size
    assert all(a.end == b.start for a, b in zip(pieces, pieces[1:], strict=False))
    assert all(0 < p.size <= per for p in pieces)


def test_plan_throttles_by_records_and_estimated_bytes() -> None:
    offsets = [PartitionOffsets(0, 0, 1000), PartitionOffsets(1, 0, 1000)]
    by_records = plan("t", offsets, {0: 0, 1: 500}, max_records=600, max_bytes=10**9,
                      bytes_per_message=100, records_per_task=250)
    assert by_records.next_offsets == {0: 300, 1: 800}
    assert by_records.planned == 600 and by_records.remaining == 900
    assert max(u.size for u in by_records.units) <= 250
    by_bytes = plan("t", offsets, {0: 0, 1: 0}, max_records=10**6, max_bytes=10_000,
                    bytes_per_message=100, records_per_task=10**6)
    assert by_bytes.planned == 100


def test_checkpoint_round_trips_through_json() -> None:
    checkpoint = Checkpoint("t", {0: 5, 3: 7}, batch_id=9, bytes_per_message=151.5)
    assert Checkpoint.from_json(checkpoint.to_json()) == checkpoint
