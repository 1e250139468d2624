"""What the tap benchmarks share (tap_bench.py, debezium_bench.py, pg_tap_bench.py): their
config, the MariaDB table they change, filled outside the binlog, and the tap's rate as they
print it; the config of the lake benchmarks without a broker (dispersal, verify); and the
process table the profiles read (batch_profile.py, suite_profile.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

ITEMS = ("CREATE TABLE bench.items (id INT PRIMARY KEY, name VARCHAR(40), amount DECIMAL(10,2), "
         "qty INT, updated_at DATETIME(6), note VARCHAR(100))")


def bench_settings(work: Path, source: dict[str, Any], **more: Any) -> Any:
    """A config in ``work`` (its ``sluice.yml``): an embedded broker of its own on a free port,
    the state under ``work``, ``source`` as the source ``bench`` (``more``: other sections);
    returns the loaded settings."""
    from python_ingest.runtime.processes import free_port

    return _settings(work, {
        **more,
        "broker": {"bootstrap_servers": f"127.0.0.1:{free_port()}", "embedded": True,
                   "data_dir": str(work / "broker")},
        "state_dir": str(work / "state"),
        "sources": {"bench": source},
    })


def lake_settings(work: Path, **more: Any) -> Any:
    """A config in ``work`` (its ``sluice.yml``) for a benchmark that writes lake tables and
    starts no broker of sluice's: the warehouse and the state under ``work`` (``more``: other
    sections); returns the loaded settings."""
    return _settings(work, {"catalog": {"warehouse": str(work / "warehouse")},
                            "broker": {"embedded": False}, "state_dir": str(work / "state"),
                            **more})


def _settings(work: Path, config: dict[str, Any]) -> Any:
    """``config`` written to ``work``'s ``sluice.yml`` and loaded (no environment)."""
    import yaml

    from python_ingest.config import load_settings

    path = work / "sluice.yml"
    path.write_text(yaml.safe_dump(config))
    return load_settings(path, env={})


def fill_items(cur: Any, rows: int) -> float:
    """``bench.items`` created with ``rows`` rows written outside the binlog (the fill is not
    part of what is measured); returns the seconds the fill took."""
    cur.execute("CREATE DATABASE bench")
    cur.execute(ITEMS)
    began = time.monotonic()
    cur.execute("SET SESSION sql_log_bin = 0")
    cur.execute(f"INSERT INTO bench.items SELECT seq, CONCAT('item ', seq), seq / 100, "
                f"seq % 97, NOW(6) - INTERVAL seq SECOND, IF(seq % 3 = 0, NULL, 'ünïcode note') "
                f"FROM bench.seq_1_to_{rows}")
    cur.execute("SET SESSION sql_log_bin = 1")
    return time.monotonic() - began


def tap_rate(what: str, stats: Any, seconds: float) -> float:
    """Print the tap's row changes and messages over ``seconds``; returns its rate."""
    rate = float(stats.row_changes / seconds)
    print(f"{what}: {stats.row_changes} row changes, {stats.messages} messages in "
          f"{seconds:.1f}s = {rate:,.0f} row changes/s")
    return rate


def processes() -> dict[int, tuple[int, int, str]]:
    """Every process from /proc: {pid: (parent pid, CPU ticks user + system, start time in
    ticks since boot, which tells a pid used again from the one before)}."""
    found: dict[int, tuple[int, int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[int(entry)] = (int(fields[1]), int(fields[11]) + int(fields[12]), fields[19])
    return found
