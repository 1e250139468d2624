"""What one dispersal did: the value the CLI prints and the runner records."""

from __future__ import annotations

from dataclasses import dataclass

from python_ingest.sinks.changes import Position


@dataclass(frozen=True)
class DispersalResult:
    """One target brought from ``since`` (None: first, full copy) to ``until``."""

    job: str
    target: str
    since: Position | None
    until: Position
    upserted: int
    deleted: int
    seconds: float

    @property
    def up_to_date(self) -> bool:
        return self.since is not None and self.since.batch_id == self.until.batch_id

    def summary(self) -> str:
        """One line: rows upserted and deleted, position from → to."""
        start = "nothing (full copy)" if self.since is None else self.since.describe()
        if self.up_to_date:
            return f"{self.job} → {self.target}: up to date at {self.until.describe()}"
        rate = (self.upserted + self.deleted) / self.seconds if self.seconds > 0 else 0.0
        return (f"{self.job} → {self.target}: upserted {self.upserted}, deleted {self.deleted}, "
                f"position {start} → {self.until.describe()} in {self.seconds:.1f}s "
                f"({rate:,.0f} rows/s)")

    def as_details(self) -> dict[str, object]:
        """For meta.runs details."""
        return {"target": self.target, "upserted": self.upserted, "deleted": self.deleted,
                "from": None if self.since is None else self.since.batch_id,
                "to": self.until.batch_id, "commit": self.until.commit,
                "seconds": round(self.seconds, 3)}
