"""The index held in memory (steps/merge/index_cache.py) and the entries a lake commit carries
(steps/merge/index.py): the parts that need no Spark."""

from __future__ import annotations

from typing import Any

from python_ingest.steps.merge import index_cache
from python_ingest.steps.merge.changeset import KeyState
from python_ingest.steps.merge.index import carried_entries, entries_property


def test_a_batchs_entries_survive_the_commit_property_exactly() -> None:
    entries = [("", 1, False), ("∅", 2, True), ("a|b", 2**62, False), ("é' \"\\", 0, True)]
    property_ = entries_property(entries)
    assert list(property_) == ["sluice.index.entries"]
    assert carried_entries(property_["sluice.index.entries"]) == entries
    assert carried_entries(entries_property([])["sluice.index.entries"]) == []


def test_the_held_indexes_stay_within_the_total_keys_least_recently_used_dropped(
        monkeypatch: Any) -> None:
    monkeypatch.setattr(index_cache, "TOTAL_KEYS", 5)
    held = {name: index_cache._Held(None, 1, {f"{name}{i}": KeyState(i, True)
                                             for i in range(keys)}, used=used)
            for name, keys, used in (("old", 2, 1.0), ("mid", 2, 2.0), ("new", 3, 3.0))}
    monkeypatch.setattr(index_cache, "_held", dict(held))
    index_cache._evict(keep="old")  # the one a batch is using stays, whatever its age
    assert set(index_cache._held) == {"old", "new"}
    index_cache.lake_committed("new", 2, [("x", 9, False)])
    assert index_cache.unindexed("new") == 1 and index_cache.unindexed("old") == 0
    assert index_cache._held["new"].states["x"] == KeyState(9, True)
    index_cache.lake_committed("new", 2, [("y", 10, False)])  # a batch it already has
    assert "new" not in index_cache._held  # dropped: the lake's commits still carry them
