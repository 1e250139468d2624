"""A memory budget shared by what one process holds per table (steps/merge/index_cache.py's indexes,
steps/history/writer.py's history versions): which to let go, least recently used first."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

T = TypeVar("T")


def over_budget(held: Mapping[str, T], size: Callable[[T], int], used: Callable[[T], float],
                budget: int, keep: str) -> list[str]:
    """The names in ``held`` to drop, least recently ``used`` first, until the sizes of the
    rest add up to at most ``budget``; ``keep`` (the one just written) is never among them."""
    total = sum(size(h) for h in held.values())
    drop = []
    for name, item in sorted(held.items(), key=lambda entry: used(entry[1])):
        if total <= budget:
            break
        if name != keep:
            total -= size(item)
            drop.append(name)
    return drop
