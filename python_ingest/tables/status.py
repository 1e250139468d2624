"""Where each job stands, in one JSON file every run updates: ``<state_dir>/status.json``.

Every run of a job (``sluice run``, a continuous runner's batches, failures too) merges its
job's entry into the file under a file lock and replaces the file atomically, so ``sluice
status`` answers from it in well under a second without starting Spark, and a reader never
sees half a file. A continuous runner also records itself (pid, host, heartbeat), so a status
reader can tell a runner that stopped from one that is alive.

Entry per job: ``state`` (running, maintaining, idle, failing, retrying, stopped),
``checkpoint`` (the next offset per partition and the batch id), ``last_batch`` (run id,
outcome, counts, duration, cost), ``newest_event_at`` (Kafka timestamp of the newest
event merged into the lake), ``failing_since``/``failures``/``last_error``/``next_retry_at``
while failing, ``services`` (a runner's last table services apart from a batch: when, seconds,
what ran, error), ``cost`` (runs and their cost since the file began), and for a files job
``late_partitions`` (the late partitions it skipped so far, as its newest run counted them:
docs/files-source.md). The file is owner-only: errors may quote data.

A run's cost (``runtime.cost``): ``executor_s``, the seconds its Spark tasks ran (core-seconds
its tasks held), and ``cpu_s``, their JVM CPU time. ``core_seconds`` is kept for older readers:
the executor seconds when the run was metered, else (and before issue #34.6) wall time × the
driver's cores, which charges idle cores and counts shared cores once per job running at once.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from python_ingest.exceptions import ConfigError
from python_ingest.runtime.cost import Cost
from python_ingest.runtime.files import private_dir, write_private
from python_ingest.runtime.processes import host_name

STATUS_FILE = "status.json"
HEARTBEAT_STALE_S = 30.0  # a runner whose heartbeat is older than this is taken as gone
ERROR_CHARS = 2000  # of a failure's message kept in the file (meta.runs keeps it whole)
_THREADS = threading.Lock()  # the file lock is per process; threads of one process wait here


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def parse_iso(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


class StatusFile:
    """The status file of one state folder."""

    def __init__(self, state_dir: Path) -> None:
        self.path = Path(state_dir) / STATUS_FILE

    def read(self) -> dict[str, Any]:
        """The whole file ({} when no run has written it yet)."""
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except json.JSONDecodeError:  # never half written (atomic replace); foreign content
            return {}
        return data if isinstance(data, dict) else {}

    @contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        private_dir(self.path.parent)
        with _THREADS, open(self.path.with_name(f".{STATUS_FILE}.lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = self.read()
            yield data
            data["updated_at"] = now_iso()
            write_private(self.path, json.dumps(data, indent=1, sort_keys=True, default=str))

    def update_job(self, job: str, **fields: Any) -> dict[str, Any]:
        """Merge ``fields`` into ``job``'s entry (None removes a field); the new entry."""
        with self._locked() as data:
            entry = data.setdefault("jobs", {}).setdefault(job, {})
            for key, value in fields.items():
                if value is None:
                    entry.pop(key, None)
                else:
                    entry[key] = value
            return dict(entry)

    def record_run(self, job: str, run_id: str, outcome: str, counts: Mapping[str, int],
                   duration_s: float, core_seconds: float, batch_id: int | None,
                   checkpoint: Mapping[str, Any] | None, newest_event_at: str | None,
                   error: str | None, cost: Cost | None = None) -> dict[str, Any]:
        """What a finished run changes in its job's entry (the runner adds its own state).
        With the run's metered ``cost``, ``core_seconds`` is its executor seconds."""
        figures = cost.as_dict() if cost is not None else {}
        core_seconds = figures.get("executor_s", core_seconds)
        with self._locked() as data:
            entry = data.setdefault("jobs", {}).setdefault(job, {})
            total = entry.setdefault("cost", {"runs": 0, "core_seconds": 0.0})
            total["runs"] += 1
            total["core_seconds"] = round(total["core_seconds"] + core_seconds, 3)
            for key, value in figures.items():  # since the file's runs were metered
                total[key] = round(total.get(key, 0.0) + value, 3)
            entry["last_run"] = {"run_id": run_id, "outcome": outcome, "at": now_iso(),
                                 "duration_s": round(duration_s, 3), **figures}
            if checkpoint is not None:
                entry["checkpoint"] = dict(checkpoint)
            if "late_partitions" in counts:  # a files job's: kept whatever the outcome
                entry["late_partitions"] = int(counts["late_partitions"])
            if outcome == "failed":
                entry["failures"] = int(entry.get("failures", 0)) + 1
                entry.setdefault("failing_since", now_iso())
                entry["last_error"] = (error or "")[:ERROR_CHARS]
                entry["state"] = "failing"
            else:
                for key in ("failures", "failing_since", "last_error", "next_retry_at"):
                    entry.pop(key, None)
                entry["state"] = "idle"
            if outcome == "succeeded":
                entry["last_batch"] = {"run_id": run_id, "batch_id": batch_id,
                                       "finished_at": now_iso(), "counts": dict(counts),
                                       "duration_s": round(duration_s, 3),
                                       "core_seconds": round(core_seconds, 3), **figures}
                if newest_event_at:
                    entry["newest_event_at"] = newest_event_at
            return dict(entry)

    def record_runner(self, state: str, jobs: list[str], **extra: Any) -> None:
        """The continuous runner's own entry: who it is and that it is alive."""
        with self._locked() as data:
            runner = data.get("runner") or {}
            if state == "starting" or runner.get("pid") != os.getpid():
                runner = {"pid": os.getpid(), "host": host_name(),
                          "started_at": now_iso()}
            runner.update(state=state, jobs=jobs, heartbeat_at=now_iso(), **extra)
            data["runner"] = runner

    def check_free(self) -> None:
        """Raise ConfigError when another live runner records itself in this file: two runners
        sharing one state folder would overwrite each other's entries (each needs its own,
        ``SLUICE_STATE_DIR``; the warehouse they may share)."""
        data = self.read()
        runner = data.get("runner") or {}
        if runner.get("pid") == os.getpid() or not self.runner_alive(data):
            return
        raise ConfigError(
            "state_dir", f"the runner pid {runner.get('pid')} on {runner.get('host')} already "
            f"keeps its status in {self.path}", "give this runner a state folder of its own "
            "(SLUICE_STATE_DIR=...); runners on one warehouse split its jobs between them")

    def runner_alive(self, data: Mapping[str, Any] | None = None) -> bool:
        """Whether the recorded runner still runs (its heartbeat is recent and, on this
        host, its process exists)."""
        runner = (data if data is not None else self.read()).get("runner") or {}
        if runner.get("state") in (None, "stopped"):
            return False
        beat = parse_iso(runner.get("heartbeat_at"))
        if beat is None or (datetime.now(UTC) - beat).total_seconds() > HEARTBEAT_STALE_S:
            return False
        if runner.get("host") == host_name():
            try:
                os.kill(int(runner["pid"]), 0)
            except (ProcessLookupError, ValueError, KeyError):
                return False
            except PermissionError:
                return True
        return True
