"""Where a Kafka target's position is kept: a small JSON file per job and target under the
project's state folder, ``<state_dir>/dispersal/<warehouse id>/<job>__<target>.json``; the
warehouse id (a hash of the warehouse's path) ties the position to the lake it was read from,
so a project pointed at another warehouse starts with a full copy instead of a position that
lake never had.

A topic cannot hold a position in the same commit as the messages (a transactional producer
could, with read_committed consumers; plain consumers would not see the difference), so the
position is written after the broker acknowledged every message of the range: a crash before
that sends the range again (at least once), keyed, so a consumer that keeps the last value
per key converges to the lake (docs/dispersal.md).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from python_ingest.runtime.files import private_dir
from python_ingest.sinks.changes import Position

STATE_FOLDER = "dispersal"


class PositionFile:
    """The position file of one job's Kafka target."""

    def __init__(self, state_dir: Path, warehouse: str, job: str, target: str) -> None:
        lake = hashlib.sha256(warehouse.encode()).hexdigest()[:12]
        self.warehouse = warehouse
        self.path = state_dir / STATE_FOLDER / lake / f"{job}__{target}.json"

    def read(self) -> Position | None:
        """The stored position (None: never dispersed)."""
        if not self.path.is_file():
            return None
        data = json.loads(self.path.read_text())
        return Position(str(data["commit"]), int(data["batch_id"]))

    def write(self, position: Position, topic: str) -> None:
        """Replace the position atomically and durably (temp file, fsync, rename)."""
        private_dir(self.path.parent)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        text = json.dumps({"commit": position.commit, "batch_id": position.batch_id,
                           "topic": topic, "warehouse": self.warehouse})
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        tmp.replace(self.path)
