"""Where the test suite's time goes: each test's start and end, and the CPU of each process
tree, so that a test's wall time can be set against the CPU its worker's tree spent.

    .venv/bin/python bench/suite_profile.py sample OUT.jsonl &      # /proc, once a second
    make test PYTEST_ARGS="-p bench.suite_profile"                  # logs to .sluice/suite-log
    .venv/bin/python bench/suite_profile.py report OUT.jsonl         # per file and idle

The report takes the tests that ran while OUT.jsonl was sampled (the log folder keeps
earlier runs' records too).

The report lists the files by wall time minus their worker tree's CPU (waits: sleeps, polls,
servers starting) and the whole machine's idle fraction by minute. Servers that detach from
the worker (pg_ctl's PostgreSQL, a daemonized mariadbd) are not in its tree: their CPU is not
counted for the test, only in the machine's figures.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import processes  # noqa: E402

LOG = Path(__file__).resolve().parent.parent / ".sluice" / "suite-log"
_out: Any = None


def _log(record: dict[str, Any]) -> None:
    global _out
    if _out is None:
        LOG.mkdir(parents=True, exist_ok=True)
        _out = open(LOG / f"{os.getpid()}.jsonl", "a", buffering=1)  # noqa: SIM115
    _out.write(json.dumps({"pid": os.getpid(), **record}) + "\n")


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    _log({"id": nodeid, "start": time.time()})


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    _log({"id": nodeid, "end": time.time()})


def sample(out: Path, seconds: float) -> None:
    """Every second: each process's CPU since the last sample, added to it and to each of its
    ancestors, and the machine's /proc/stat line."""
    last: dict[tuple[int, str], int] = {}
    with open(out, "w") as sink:
        end = time.time() + seconds
        while time.time() < end:
            info = processes()
            per: dict[str, int] = collections.Counter()
            for pid, (_, cpu, started) in info.items():
                spent = cpu - last.get((pid, started), 0)
                last[(pid, started)] = cpu
                node = pid
                for _ in range(30):
                    if node not in info:
                        break
                    per[str(node)] += spent
                    node = info[node][0]
            stat = Path("/proc/stat").read_text().splitlines()[0].split()[1:9]
            sink.write(json.dumps({"t": time.time(), "cpu": {k: v for k, v in per.items() if v},
                                   "stat": stat}) + "\n")
            time.sleep(1)


def report(samples_file: Path) -> None:
    hz = os.sysconf("SC_CLK_TCK")
    tests: dict[tuple[int, str], dict[str, float]] = {}
    for path in LOG.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            tests.setdefault((record["pid"], record["id"]), {}).update(
                {k: v for k, v in record.items() if k in ("start", "end")})
    # xdist's controller logs every test too: keep the workers' records
    logged = collections.Counter(pid for pid, _ in tests)
    controller = logged.most_common(1)[0][0] if len(logged) > 1 else None
    samples = [json.loads(line) for line in samples_file.read_text().splitlines()][1:]
    times = [s["t"] for s in samples]
    if not times:
        sys.exit(f"{samples_file}: fewer than two samples")
    files: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for (pid, node), t in tests.items():
        if pid == controller or "end" not in t or not times[0] <= t["start"] <= times[-1]:
            continue  # (or a test of an earlier run)
        first, after = bisect.bisect_left(times, t["start"]), bisect.bisect_right(times, t["end"])
        cpu = sum(s["cpu"].get(str(pid), 0) for s in samples[first:after]) / hz
        figures = files[node.split("::")[0]]
        figures[0] += t["end"] - t["start"]
        figures[1] += cpu
    print("wall_s  tree_cpu_s  wall-cpu  file")
    for name, (wall, cpu) in sorted(files.items(), key=lambda f: f[1][1] - f[1][0])[:40]:
        print(f"{wall:7.1f} {cpu:10.1f} {wall - cpu:9.1f}  {name}")
    idle = []
    for i in range(0, len(samples) - 60, 60):
        spent = [int(b) - int(a) for a, b in zip(samples[i]["stat"], samples[i + 60]["stat"],
                                                 strict=True)]
        idle.append(round((spent[3] + spent[4]) / max(sum(spent), 1), 2))
    print("machine idle by minute:", idle)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    sub = parser.add_subparsers(dest="command", required=True)
    sampled = sub.add_parser("sample", help="sample /proc once a second into OUT")
    sampled.add_argument("out", type=Path)
    sampled.add_argument("--seconds", type=float, default=7200, help="how long (7200)")
    reported = sub.add_parser("report", help="per file and idle, from the samples in OUT")
    reported.add_argument("out", type=Path)
    args = parser.parse_args()
    if args.command == "sample":
        sample(args.out, args.seconds)
    else:
        report(args.out)


if __name__ == "__main__":
    main()
