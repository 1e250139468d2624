"""The tap under a random DML workload: clean stops, SIGKILLs, and the oracle equals MariaDB."""

from __future__ import annotations

import random
import threading

import pytest

from tests.sources.binlog.workload import Workload


@pytest.mark.e2e
def test_random_workload_while_tapping_ends_equal(tap_env) -> None:
    env = tap_env
    with env.server.root(env.database) as conn:
        Workload.create(conn)
        env.add_jobs()
        env.tap_until_end()  # the checkpoint: the binlog's end before the workload
        tap = env.start_tap()
        try:
            Workload(conn, seed=11).run(600)
            env.wait_caught_up()
            out = env.stop_tap(tap)
        finally:
            env.close()
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
        env.add_jobs()
        env.tap_until_end()  # the checkpoint: the binlog's end before the workload
        workload = Workload(conn, seed=23)
        writer = threading.Thread(target=workload.run, args=(1200, 0.008))
        writer.start()
        try:
            kills = env.kill_taps_while(writer, rng, (0.2, 2.0))
        finally:
            writer.join()
            env.close()
    assert kills >= 3
    assert env.assert_equal("orders") > 50
    assert env.assert_equal("order_lines") > 50
