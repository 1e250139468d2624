"""The ``runner:`` section of sluice.yml: how a continuous runner schedules jobs.

    runner:
      max_parallel_jobs: 2     # jobs in flight at once (default: the driver's cores)
      poll_interval_s: 1.0     # how often idle jobs' topics are checked for new messages
      retry_initial_s: 5       # a failing job waits this long before its first retry,
      retry_max_s: 300         #   doubling per failure up to this
      maintain_every: 50       # table services of a job every N of its batches (0: never)
      services_quiet_s: 5      # a job's due table services wait until its topic has had
                               #   nothing new this long after its batch (0: right after it)
      services_max_deferred: 5 #   but run before its Nth further batch at the latest

A job's own ``priority`` (an integer, default 0; higher first) orders it against the others
and weights its Spark FAIR pool.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from python_ingest.exceptions import ConfigError

RUNNER_KEYS = {"max_parallel_jobs", "poll_interval_s", "retry_initial_s", "retry_max_s",
               "maintain_every", "services_quiet_s", "services_max_deferred"}


def _cores() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
               else os.cpu_count() or 1)


@dataclass(frozen=True)
class RunnerConfig:
    """How ``sluice run --continuous`` schedules its jobs."""

    max_parallel_jobs: int = field(default_factory=_cores)
    poll_interval_s: float = 1.0
    retry_initial_s: float = 5.0
    retry_max_s: float = 300.0
    maintain_every: int = 50
    # a job's table services (a lake compaction: seconds) hold its next batch back (one writer
    # at a time), so they wait for a quiet moment: no new message for services_quiet_s after
    # its batch; a job never quiet runs them before its services_max_deferred-th batch after
    services_quiet_s: float = 5.0
    services_max_deferred: int = 5


def _number(raw: Mapping[str, Any], key: str, default: float, minimum: float) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
        raise ConfigError(f"runner.{key}", f"expected a number >= {minimum:g}, got {value!r}")
    return float(value)


def parse_runner(raw: Mapping[str, Any]) -> RunnerConfig:
    """Validate the ``runner:`` mapping (ConfigError naming the field)."""
    unknown = set(raw) - RUNNER_KEYS
    if unknown:
        raise ConfigError(f"runner.{sorted(unknown)[0]}", "unknown setting",
                          f"known: {', '.join(sorted(RUNNER_KEYS))}")
    d = RunnerConfig()
    config = RunnerConfig(
        max_parallel_jobs=int(_number(raw, "max_parallel_jobs", d.max_parallel_jobs, 1)),
        poll_interval_s=_number(raw, "poll_interval_s", d.poll_interval_s, 0.05),
        retry_initial_s=_number(raw, "retry_initial_s", d.retry_initial_s, 0),
        retry_max_s=_number(raw, "retry_max_s", d.retry_max_s, 0),
        maintain_every=int(_number(raw, "maintain_every", d.maintain_every, 0)),
        services_quiet_s=_number(raw, "services_quiet_s", d.services_quiet_s, 0),
        services_max_deferred=int(_number(raw, "services_max_deferred",
                                          d.services_max_deferred, 0)),
    )
    if config.retry_max_s < config.retry_initial_s:
        raise ConfigError("runner.retry_max_s", "must be at least retry_initial_s")
    return config


def parse_priority(value: Any, where: str) -> int:
    """A job's ``priority``: an integer, higher runs first."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}.priority", f"expected an integer, got {value!r}",
                          "higher runs first; the default is 0")
    return value
