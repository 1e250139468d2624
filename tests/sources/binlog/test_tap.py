"""The tap under a random DML workload: clean stops, SIGKILLs, and the oracle equals MariaDB."""

from __future__ import annotations

import random

import pytest

from tests.sources.binlog.workload import Workload, workload_tapped


@pytest.mark.e2e
def test_random_workload_while_tapping_ends_equal(tap_env) -> None:
    env = tap_env
    with workload_tapped(env, seed=11) as (workload, tap):
        workload.run(600)
        env.wait_caught_up()
        out = env.stop_tap(tap)
    assert tap.returncode == 0 and "STOPPED" not in out, out  # no table stopped
    assert "stopped cleanly" in out, out  # SIGTERM: every event acknowledged, then saved
    assert env.assert_equal("orders") > 50
    assert env.assert_equal("order_lines") > 50
    checkpoint = env.checkpoint()
    assert checkpoint is not None and (checkpoint["file"], checkpoint["pos"]) == env.master()


@pytest.mark.e2e
def test_tap_killed_at_random_moments_still_ends_equal(tap_env) -> None:
    env = tap_env
    rng = random.Random(5)
    with env.server.root(env.database) as conn:
        Workload.create(conn)
        env.start_tapping()  # the checkpoint: the binlog's end before the workload
        workload = Workload(conn, seed=23)
        kills = env.kill_taps_during(lambda: workload.run(1200, 0.008), rng, (0.2, 2.0))
    assert kills >= 3
    assert env.assert_equal("orders") > 50
    assert env.assert_equal("order_lines") > 50
