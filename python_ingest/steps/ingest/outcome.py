"""What an ingestion run did (``IngestResult``), for either source kind: shared by
steps/ingest/land.py (Kafka) and steps/ingest/files.py (files), which import neither of each
other's internals. (The fault points crash tests kill a run at: runtime/faults.py.)"""

from __future__ import annotations

from dataclasses import dataclass

from python_ingest.sources.kafka.workunits import Plan
from python_ingest.tables.checkpoints import Checkpoint


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

