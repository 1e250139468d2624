"""The demo's last act: the job manager running continuously while events keep arriving.

A producer thread sends demo trip events at a steady rate; a continuous runner (the same as
``sluice run --all --continuous``) picks them up batch after batch for ``seconds``; a printer
thread shows, every few seconds, each job's state, backlog and freshness from the status file
(what ``sluice status`` reads).
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from python_ingest.config import Settings
from python_ingest.demo import trips as demo
from python_ingest.runner.scheduler import Runner
from python_ingest.tables.status import StatusFile, parse_iso

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PRINT_EVERY_S = 5.0


def run_live(spark: SparkSession, settings: Settings, generator: demo.TripsGenerator,
             seconds: float, rate: int) -> int:
    """Produce ``rate`` events/s into the demo topic and run every job continuously for
    ``seconds``; the number of events produced."""
    stop = threading.Event()
    sent = [0]

    def produce() -> None:
        while not stop.is_set():
            started = time.monotonic()
            sent[0] += demo.produce(settings.broker.bootstrap_servers, demo.DEMO_TOPIC,
                                    generator.events(rate))
            stop.wait(max(0.0, 1.0 - (time.monotonic() - started)))

    status = StatusFile(settings.path(settings.state_dir))

    def show() -> None:
        while not stop.wait(PRINT_EVERY_S):
            jobs = status.read().get("jobs") or {}
            now = datetime.now(UTC)
            parts = []
            for name in sorted(settings.jobs):
                entry = jobs.get(name) or {}
                newest = parse_iso(entry.get("newest_event_at"))
                fresh = f"{(now - newest).total_seconds():.0f}s" if newest else "-"
                batch = (entry.get("last_batch") or {}).get("batch_id", "-")
                parts.append(f"{name}: {entry.get('state', '-')}, batch {batch}, backlog "
                             f"{entry.get('backlog', '-')}, newest event merged {fresh} ago")
            print(f"  [{now:%H:%M:%S}] produced {sent[0]}; " + "; ".join(parts), flush=True)

    threads = [threading.Thread(target=produce, daemon=True),
               threading.Thread(target=show, daemon=True)]
    for thread in threads:
        thread.start()
    try:
        Runner(spark, settings, sorted(settings.jobs), duration_s=seconds).run()
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    return sent[0]
