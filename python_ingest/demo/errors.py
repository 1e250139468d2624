"""The demo's error replay: list the trips job's error rows by reason, then replay the rows
whose only fault was a negative fare (a sign error the owner fixes with ``--set``), as
``sluice errors trips`` and ``sluice errors replay trips ...`` would (docs/error-replay.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from python_ingest.config import Settings
from python_ingest.replay.replay import Selection, replay
from python_ingest.replay.selection import by_reason, chosen, error_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JOB = "trips"
FIX = Selection(reason="fare_amount", sets=("fare = abs(fare)",))


def replay_demo_errors(spark: SparkSession, settings: Settings) -> None:
    """Print the listing, replay the negative fares, print what the replay did."""
    if JOB not in settings.jobs:
        return
    rows = error_rows(spark, JOB)
    if rows is None:
        return
    print(f"\nerror rows of {JOB} (sluice errors {JOB}):")
    for count in by_reason(chosen(rows, include_resolved=True)):
        print(f"  {count.unresolved:>6} unresolved {count.resolved:>6} resolved  {count.step:<6} "
              f"{count.reason}")
    print(f"replaying the negative fares as sign errors: sluice errors replay {JOB} "
          f"--reason {FIX.reason} --set '{FIX.sets[0]}'")
    result = replay(spark, settings, settings.job(JOB), FIX)
    if result.run is None:
        print("  nothing to replay (every such row was replayed before)")
        return
    counts = result.run.counts
    print(f"  replayed {result.replayed} rows as batch {result.run.batch_id}: valid "
          f"{counts.get('valid', 0)}, still failing the suite "
          f"{counts.get('expectation_errors', 0)}, inserted {counts.get('inserted', 0)}, "
          f"updated {counts.get('updated', 0)}")
