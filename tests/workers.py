"""How many test workers `make test` starts (``python tests/workers.py``): one per core this
process may use (its CPU affinity, and a cgroup's CPU quota when one is set, as in a
container), and one per 4 GiB of memory at most; at least one."""

from __future__ import annotations

import math
import os
from pathlib import Path

GIB_PER_WORKER = 4  # a worker's Spark, the `sluice` processes it starts and its servers


def quota_cores(cpu_max: str) -> int | None:
    """The cores a cgroup v2 ``cpu.max`` line allows ("200000 100000": 2), None without a
    quota ("max 100000")."""
    parts = cpu_max.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    return max(1, math.ceil(int(parts[0]) / int(parts[1])))


def workers(cpu_max: Path = Path("/sys/fs/cgroup/cpu.max"),
            meminfo: Path = Path("/proc/meminfo")) -> int:
    cores = len(os.sched_getaffinity(0))
    try:
        quota = quota_cores(cpu_max.read_text())
    except (OSError, ValueError):
        quota = None
    if quota is not None:
        cores = min(cores, quota)
    try:
        kib = next(int(line.split()[1]) for line in meminfo.read_text().splitlines()
                   if line.startswith("MemTotal:"))
        cores = min(cores, kib // (GIB_PER_WORKER * 1024 * 1024))
    except (OSError, ValueError, StopIteration, IndexError):
        pass
    return max(1, cores)


if __name__ == "__main__":
    print(workers())
