"""Table services of a job (``services:`` on a job): how often its lake table compacts, how
many commits cleaning keeps, when its global index is compacted, how long delete markers
are kept and when the step tables' small files are rewritten. See docs/index.md, "Services"."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from python_ingest.config.checks import check_keys, mapping, positive_int
from python_ingest.exceptions import ConfigError

DAY = 24 * 3600
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": DAY}
FOREVER = "forever"  # raw_retention: never expire raw rows
_DURATION = re.compile(r"^\s*(\d+)\s*([smhd])\s*$")


@dataclass(frozen=True)
class ServicesConfig:
    """When a job's table services run after a merge (``sluice maintain`` runs them all)."""

    # a late change older than a delete it arrives after is refused for this long after the
    # delete; afterwards the delete marker is dropped and such a change brings the row back
    tombstone_retention_s: int = 7 * DAY
    # the index is rewritten to one entry per key after every this many merged batches
    # (0: never inline; ``sluice maintain`` still does)
    index_compact_every: int = 20
    # the lake table's services run after every this many merged batches (Hudi: compaction
    # of the merge-on-read file groups, then cleaning; 5 is Hudi's
    # default delta-commit count; Iceberg: its position delete files rewritten); 0: never
    # inline
    compact_every: int = 5
    # cleaning keeps the files of this many newest commits (a reader may still use them;
    # Hudi's hoodie.clean.commits.retained, default 10)
    keep_commits: int = 10
    # raw rows of merged batches are deleted this long after they were ingested (None:
    # kept for ever); rows a replay may still need and replayed rows are kept
    raw_retention_s: int | None = 7 * DAY
    # the append-only step tables (raw, staging, valid, errors: a file or more per batch)
    # have their small files rewritten into few after every this many merged batches, so that
    # reading a batch does not open one file per earlier batch; 0: never inline
    steps_compact_every: int = 20


def parse_duration(value: Any, field_name: str) -> int:
    """Seconds from a number of seconds or a text such as ``90s``, ``15m``, ``12h``, ``7d``."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    found = _DURATION.match(value) if isinstance(value, str) else None
    if not found:
        raise ConfigError(field_name, f"expected a duration, got {value!r}",
                          "a number of seconds or a text such as 90s, 15m, 12h, 7d")
    return int(found.group(1)) * _UNITS[found.group(2)]


def parse_services(raw: Any, where: str) -> ServicesConfig:
    """Validate a job's ``services`` mapping (``where`` is ``jobs.<name>.services``)."""
    values: Mapping[str, Any] = mapping(raw, where)
    check_keys(values, {"tombstone_retention", "index_compact_every", "compact_every",
                        "keep_commits", "raw_retention", "steps_compact_every"}, where)
    d = ServicesConfig
    raw_retention = values.get("raw_retention", d.raw_retention_s)
    return ServicesConfig(
        tombstone_retention_s=parse_duration(
            values.get("tombstone_retention", d.tombstone_retention_s),
            f"{where}.tombstone_retention"),
        index_compact_every=count(values.get("index_compact_every", d.index_compact_every),
                                  f"{where}.index_compact_every"),
        compact_every=count(values.get("compact_every", d.compact_every),
                            f"{where}.compact_every"),
        keep_commits=positive_int(values.get("keep_commits", d.keep_commits),
                                  f"{where}.keep_commits"),
        raw_retention_s=None if raw_retention == FOREVER else parse_duration(
            raw_retention, f"{where}.raw_retention"),
        steps_compact_every=count(values.get("steps_compact_every", d.steps_compact_every),
                                  f"{where}.steps_compact_every"),
    )


def count(value: Any, field_name: str) -> int:
    """A whole number of batches, 0 included (0: never)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(field_name, f"expected a whole number of batches, got {value!r}",
                          "0 turns the service off between `sluice maintain` runs")
    return value
