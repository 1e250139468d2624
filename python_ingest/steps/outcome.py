"""What an ingestion run did (``IngestResult``), for either source kind, and the named fault
points crash tests kill a run at (``fault_point``): shared by steps/ingest.py (Kafka) and
steps/ingest_files.py (files), which import neither of each other's internals."""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import dataclass

from python_ingest.sources.kafka.workunits import Plan
from python_ingest.tables.checkpoints import Checkpoint

log = logging.getLogger("python_ingest.steps.ingest")  # where the fault messages always were

FAULT_ENV = "SLUICE_FAULT"


def fault_point(name: str) -> None:
    """Kill this process hard at a named point when $SLUICE_FAULT says so (crash tests)."""
    if os.environ.get(FAULT_ENV) == name:
        log.warning("fault injection: killing the process at '%s'", name)
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass(frozen=True)
class IngestResult:
    """What one ingestion run did."""

    batch_id: int | None
    read: int
    landed: int
    errors: int
    bytes: int
    plan: Plan
    checkpoint: Checkpoint | None

    @property
    def up_to_date(self) -> bool:
        return self.batch_id is None

