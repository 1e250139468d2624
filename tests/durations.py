"""The test files' measured seconds, which `make test` schedules longest first.

pytest-xdist (``--dist loadfile``) hands each worker a whole file at a time; left to itself it
orders files by their number of tests, so the slowest files (one or two long pipeline tests
each) start last and one worker runs them alone at the end. ``pytest_collection_modifyitems``
in tests/conftest.py sorts the files by durations.txt instead, longest first (files not listed
keep their order, after the listed ones): the short files fill in at the end.

Refresh durations.txt from a run's JUnit XML:
    make test PYTEST_ARGS=--junitxml=/tmp/suite.xml
    .venv/bin/python -m tests.durations /tmp/suite.xml > tests/durations.txt
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

LISTED = Path(__file__).with_name("durations.txt")


def file_seconds(path: Path = LISTED) -> dict[str, float]:
    """{test file relative to the repository: seconds} from durations.txt ({} if missing)."""
    if not path.is_file():
        return {}
    seconds: dict[str, float] = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            value, name = line.split(maxsplit=1)
            seconds[name.strip()] = float(value)
    return seconds


def from_junit(xml: Path) -> dict[str, float]:
    """Seconds per test file of a JUnit XML report (pytest's --junitxml)."""
    totals: dict[str, float] = defaultdict(float)
    for case in ET.parse(xml).iter("testcase"):
        parts = (case.get("classname") or "").split(".")
        while parts and parts[-1][:1].isupper():  # a test class: the module is before it
            parts.pop()
        totals["/".join(parts) + ".py"] += float(case.get("time") or 0)
    return totals


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.durations JUNIT_XML > tests/durations.txt", file=sys.stderr)
        return 2
    print("# seconds per test file in one `make test` run (tests/durations.py refreshes it)")
    totals = from_junit(Path(argv[0]))
    for name, seconds in sorted(totals.items(), key=lambda item: -item[1]):
        if seconds >= 5:
            print(f"{seconds:8.1f} {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
