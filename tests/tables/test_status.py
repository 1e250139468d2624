"""The status file's runner entry: a second runner refuses a state folder a live runner keeps
its status in (the two would overwrite each other's job entries), before Spark starts; a job
entry's figures (late partitions, cost)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from python_ingest.exceptions import ConfigError
from python_ingest.runtime.cost import Cost
from python_ingest.tables.status import StatusFile, now_iso


def _record(folder: Path, **runner: Any) -> StatusFile:
    folder.mkdir(parents=True, exist_ok=True)
    entry = {"host": socket.gethostname(), "state": "running", "heartbeat_at": now_iso(),
             **runner}
    (folder / "status.json").write_text(json.dumps({"runner": entry, "jobs": {}}))
    return StatusFile(folder)


def test_a_state_folder_of_a_live_runner_is_refused(tmp_path: Path) -> None:
    other = subprocess.Popen(["sleep", "60"])
    try:
        status = _record(tmp_path / "a", pid=other.pid)
        with pytest.raises(ConfigError, match=f"state_dir.*pid {other.pid}.*SLUICE_STATE_DIR"):
            status.check_free()
        _record(tmp_path / "b", pid=other.pid, state="stopped").check_free()  # stopped: free
    finally:
        other.kill()
        other.wait()
    _record(tmp_path / "c", pid=other.pid).check_free()  # its process is gone: free
    _record(tmp_path / "d", pid=os.getpid()).check_free()  # this process's own entry
    StatusFile(tmp_path / "never").check_free()  # no file yet


def test_a_files_jobs_late_partitions_count_is_kept_whatever_the_outcome(tmp_path: Path) -> None:
    """#35.3: the late partitions a files job's run counted stay in its entry for `sluice
    status`, also after an up-to-date run (no batch) or a failure that counted none."""
    status = StatusFile(tmp_path)

    def record(outcome: str, counts: dict[str, int]) -> dict[str, Any]:
        return status.record_run("trips_files", "r1", outcome, counts, 1.0, 2.0, None, None,
                                 None, "boom" if outcome == "failed" else None)

    assert "late_partitions" not in record("up-to-date", {"read": 0})  # a Kafka job: none
    assert record("up-to-date", {"read": 0, "late_partitions": 2})["late_partitions"] == 2
    assert record("failed", {})["late_partitions"] == 2  # failed before counting: kept
    assert record("succeeded", {"read": 5, "late_partitions": 3})["late_partitions"] == 3
    assert status.read()["jobs"]["trips_files"]["late_partitions"] == 3


def test_a_metered_runs_cost_is_its_executor_seconds_and_old_entries_still_add_up(
        tmp_path: Path) -> None:
    """#34.6: a run's cost in the file is its Spark tasks' time (executor and CPU seconds);
    ``core_seconds`` stays for older readers, as the executor seconds; an entry written before
    runs were metered goes on adding up."""
    status = StatusFile(tmp_path)
    tmp_path.joinpath("status.json").write_text(json.dumps(  # an older file's entry
        {"jobs": {"trips": {"cost": {"runs": 3, "core_seconds": 60.0}}}}))

    def record(cost: Cost | None, outcome: str = "succeeded") -> dict[str, Any]:
        return status.record_run("trips", "r1", outcome, {"read": 5}, 10.0, 20.0, 7, None,
                                 None, None, cost)

    entry = record(Cost(executor_s=4.25, cpu_s=1.5, jobs=40, stages=44))
    assert entry["last_batch"]["executor_s"] == 4.25 and entry["last_batch"]["cpu_s"] == 1.5
    assert entry["last_batch"]["core_seconds"] == 4.25  # not 20 (wall time × cores)
    assert entry["last_run"]["executor_s"] == 4.25
    assert entry["cost"] == {"runs": 4, "core_seconds": 64.25, "executor_s": 4.25,
                             "cpu_s": 1.5}
    entry = record(Cost(executor_s=1.0, cpu_s=0.5), "failed")  # a failed run costs too
    assert entry["cost"] == {"runs": 5, "core_seconds": 65.25, "executor_s": 5.25,
                             "cpu_s": 2.0}
    assert entry["last_run"]["cpu_s"] == 0.5 and entry["last_batch"]["executor_s"] == 4.25
    entry = record(None)  # not metered: the old estimate, no executor figures
    assert entry["cost"]["core_seconds"] == 85.25 and entry["cost"]["executor_s"] == 5.25
    assert "executor_s" not in entry["last_batch"] and "executor_s" not in entry["last_run"]
    assert entry["last_batch"]["core_seconds"] == 20.0
