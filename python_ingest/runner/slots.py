"""What the continuous runner (runner/scheduler.py) keeps per job between its batches, the
table services a batch made due, and the Spark FAIR pools it runs them in."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from python_ingest.runtime.session import POOL_PREFIX

if TYPE_CHECKING:
    from python_ingest.config import JobConfig, Settings
    from python_ingest.steps.pipeline import PipelineResult
    from python_ingest.tables.names import JobTables

SERVICES_POOL = "sluice_services"


@dataclass
class JobSlot:
    """What the runner knows about one job between its batches."""

    job: JobConfig
    checkpoint: dict[str, Any] | None = None  # None until it ran once in this process
    backlog: int | None = None
    failures: int = 0
    retry_at: float = 0.0  # monotonic
    batches: int = 0
    running: bool = False
    servicing: bool = False  # its table services are queued or running
    services: Services | None = None  # due after its batches, not yet queued
    deferred: int = 0  # batches merged since its services fell due (while not queued)
    finished_at: float = 0.0  # when its last batch ended (monotonic)
    results: list[PipelineResult] = field(default_factory=list)

    def due(self, now: float) -> bool:
        """Whether the job should run now: never ran here, has messages waiting, or its
        retry is due."""
        if self.running or self.servicing or now < self.retry_at:
            return False
        return self.checkpoint is None or self.failures > 0 or bool(self.backlog)


@dataclass(frozen=True)
class Services:
    """The table services a batch made due: those of its merged batches, and the whole
    ``maintain`` every ``runner.maintain_every`` batches."""

    tables: JobTables | None
    merged: list[int]
    maintain: bool

    def joined(self, later: Services | None) -> Services:
        """These services and those a later batch made due, run together."""
        if later is None:
            return self
        return Services(later.tables or self.tables, [*self.merged, *later.merged],
                        self.maintain or later.maintain)


def fair_scheduler_conf(settings: Settings, jobs: list[JobConfig]) -> dict[str, str]:
    """Spark settings for a FAIR scheduler with one pool per job weighted by its priority
    (static settings: they apply to a session the runner starts itself)."""
    pools = "".join(
        f'  <pool name="{POOL_PREFIX}{j.name}"><schedulingMode>FIFO</schedulingMode>'
        f"<weight>{max(1, 1 + j.priority)}</weight><minShare>0</minShare></pool>\n"
        for j in jobs) + (f'  <pool name="{SERVICES_POOL}"><schedulingMode>FIFO</schedulingMode>'
                          "<weight>1</weight><minShare>0</minShare></pool>\n")
    path = settings.path(settings.state_dir) / "fairscheduler.xml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'<?xml version="1.0"?>\n<allocations>\n{pools}</allocations>\n')
    return {"spark.scheduler.mode": "FAIR", "spark.scheduler.allocation.file": str(path)}
