"""Two first runs at once on a fresh checkout (after `make setup`): both succeed.

Set-up resolved every jar already; a first run builds nothing. What two first runs still share
is the embedded broker's fresh data dir (storage formatting, the pid file): the second waits for
the first one's broker instead of starting its own or failing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from python_ingest.kafka.client import partition_offsets
from tests.conftest import REPO, STATE_DIR, free_port


@pytest.mark.e2e
def test_two_first_runs_at_once_both_succeed(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "sluice.yml"
    config.write_text(yaml.safe_dump({
        "broker": {"bootstrap_servers": f"127.0.0.1:{port}", "embedded": True,
                   "data_dir": str(tmp_path / "broker"), "heap": "256m"},
        "state_dir": str(STATE_DIR),
        "catalog": {"warehouse": str(tmp_path / "warehouse")},
    }))
    command = [sys.executable, "-m", "python_ingest.cli", "--config", str(config), "demo",
               "produce", "--events", "200", "--topic", "first.runs"]
    runs = [subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env={**os.environ}) for _ in range(2)]
    try:
        outcomes = [run.communicate(timeout=180) for run in runs]
        for run, (out, err) in zip(runs, outcomes, strict=True):
            assert run.returncode == 0, f"stdout: {out}\nstderr: {err}"
        assert sum("started the embedded broker" in out for out, _ in outcomes) == 1
        bootstrap = f"127.0.0.1:{port}"
        # both produced everything into one topic on one broker
        assert sum(p.end for p in partition_offsets(bootstrap, "first.runs")) == 400
    finally:
        subprocess.run([sys.executable, "-m", "python_ingest.cli", "--config", str(config),
                        "broker", "stop"], cwd=REPO, capture_output=True, timeout=60)
    status = subprocess.run([sys.executable, "-m", "python_ingest.cli", "--config", str(config),
                             "broker", "status"], cwd=REPO, capture_output=True, text=True,
                            timeout=60)
    assert status.returncode == 1 and "down" in status.stdout
