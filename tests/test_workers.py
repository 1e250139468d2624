"""The number of test workers `make test` starts (tests/workers.py)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.workers import quota_cores, workers


def test_a_cgroup_quota_and_the_memory_bound_the_workers(tmp_path: Path) -> None:
    assert quota_cores("max 100000") is None
    assert quota_cores("200000 100000") == 2 and quota_cores("150000 100000") == 2
    assert quota_cores("50000 100000") == 1
    cores = len(os.sched_getaffinity(0))
    cpu_max, meminfo = tmp_path / "cpu.max", tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       67108864 kB\nMemFree: 1 kB\n")  # 64 GiB: 16 workers
    cpu_max.write_text("100000 100000\n")  # a container allowed one core
    assert workers(cpu_max, meminfo) == 1
    cpu_max.write_text("max 100000\n")
    assert workers(cpu_max, meminfo) == min(cores, 16)
    meminfo.write_text("MemTotal:       6291456 kB\n")  # 6 GiB: one worker
    assert workers(tmp_path / "absent", meminfo) == 1
    assert workers(tmp_path / "absent", tmp_path / "absent") == cores
