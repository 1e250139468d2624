"""Which continuous runner runs which job, when several share one warehouse (issue #12.4).

Each runner holds a heartbeat lease of its own in ``<warehouse>/meta/.sluice_runners/`` and a
claim per job it runs in ``<warehouse>/meta/.sluice_claims/`` (tables/lease.py: a file created
only if absent, renewed in the background, taken over when its holder died). Every
``REFRESH_S`` a runner counts the live runners, gives up the idle claims beyond its fair share
(``ceil(jobs / runners)``, its lowest-priority jobs first) and claims free jobs up to it
(highest priority first). A job beyond the share that is busy (a batch running) starts no
new batch (``holds`` is false for it) and is given up at the first refresh after its batch
ends, so a runner whose jobs always have a backlog still hands them over. So a second
runner started on the same config gets half the jobs within seconds, and the jobs of a runner
that dies go to the others once its claims expire (at once when it ran on the same host: a
runner there takes them even beyond its share, and hands the extra ones over after their
batch, so a runner on another host with room gets them within seconds instead of after the
claims' TTL). The host is ``SLUICE_HOST`` when set (runtime/processes.py ``host_name``).
A claim only decides who runs a job: each batch still takes the job's lease, so a run by hand
beside the runners is refused, never doubled.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from python_ingest.runtime.processes import gone_from_this_host
from python_ingest.tables.lease import (
    CLAIM_DIR,
    Lease,
    LeaseHeldError,
    claim,
    holder_of,
    live_holders,
    release,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

RUNNER_DIR = "meta/.sluice_runners"
REFRESH_S = 5.0


class Claims:
    """The jobs this runner holds; ``refresh`` keeps its share fair."""

    def __init__(self, spark: SparkSession, priorities: dict[str, int]) -> None:
        self.spark = spark
        self.priorities = priorities
        self.me = claim(spark, f"runner-{uuid.uuid4().hex[:12]}", RUNNER_DIR)
        self.held: dict[str, Lease] = {}
        self.elsewhere: dict[str, dict[str, Any]] = {}  # job -> the holder of its claim
        self.leaving: set[str] = set()  # held beyond the share: no new batch, then given up
        self._next = 0.0

    def holds(self, job: str) -> bool:
        lease = self.held.get(job)
        return lease is not None and not lease.lost.is_set() and job not in self.leaving

    def refresh(self, busy: Callable[[str], bool], force: bool = False) -> bool:
        """Give up claims beyond the fair share (a job ``busy`` now: after its batch, starting
        no other), claim free jobs up to it and note who holds the others; whether anything
        the status shows changed."""
        now = time.monotonic()
        if not force and now < self._next:
            return False
        self._next = now + REFRESH_S
        before = (set(self.held), {n: h.get("pid") for n, h in self.elsewhere.items()})
        for name in [n for n, lease in self.held.items() if lease.lost.is_set()]:
            log.warning("runner: lost the claim on job %s (this process paused too long)", name)
            del self.held[name]
        runners = max(1, len(live_holders(self.spark, RUNNER_DIR)))
        share = math.ceil(len(self.priorities) / runners)
        by_priority = sorted(self.priorities, key=lambda n: (-self.priorities[n], n))
        for name in reversed([n for n in by_priority if n in self.held and not busy(n)]):
            if len(self.held) <= share:
                break
            release(self.held.pop(name))
            log.info("runner: job %s handed over (%d runners share %d jobs)", name, runners,
                     len(self.priorities))
        # still beyond the share: busy jobs, lowest priority first, start no new batch and are
        # given up at a refresh after their batch (a backlog never leaves a job idle)
        self.leaving = set([n for n in reversed(by_priority) if n in self.held]
                           [:max(0, len(self.held) - share)])
        refused = set()
        for name in by_priority:
            if name in self.held:
                continue
            if len(self.held) >= share and not gone_from_this_host(self.elsewhere.get(name) or {}):
                continue  # (a job whose runner died here is taken: nobody else can tell)
            try:
                self.held[name] = claim(self.spark, name)
                self.elsewhere.pop(name, None)
            except LeaseHeldError as exc:
                self.elsewhere[name] = exc.holder
                refused.add(name)
        for name in self.priorities:  # who runs the others (a job just handed over: nobody)
            if name not in self.held and name not in refused:
                self.elsewhere[name] = holder_of(self.spark, name, CLAIM_DIR) or {}
        return before != (set(self.held), {n: h.get("pid") for n, h in self.elsewhere.items()})

    def close(self, names: Iterable[str] | None = None) -> None:
        """Release the claims (all of them, or ``names``) and, with all, the heartbeat."""
        for name in list(self.held if names is None else names):
            lease = self.held.pop(name, None)
            if lease is not None:
                release(lease)
        if names is None:
            release(self.me)
