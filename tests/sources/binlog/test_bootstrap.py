"""Bootstrap: a pre-filled table's snapshot plus the tap's changes ends equal to the source."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from python_ingest.sources.binlog.bootstrap import chunk_bounds, chunk_predicate
from python_ingest.sources.binlog.server import table_shape
from tests.sources.binlog.support import REPO
from tests.sources.binlog.workload import Workload


def test_chunks_cover_the_key_space_in_key_order(tap_env) -> None:
    env = tap_env
    env.sql("CREATE TABLE kv (a INT, b VARCHAR(5), v INT, PRIMARY KEY (a, b))")
    env.sql("INSERT INTO kv SELECT seq DIV 7, CONCAT('k', seq MOD 7), seq FROM seq_1_to_1000")
    with env.server.root(env.database) as conn:
        shape = table_shape(conn, env.database, "kv")
        chunks = chunk_bounds(conn, shape, 64)
        seen = []
        with conn.cursor() as cur:
            for chunk in chunks:
                where, params = chunk_predicate(shape.key.columns, chunk)
                cur.execute(f"SELECT a, b FROM kv WHERE {where} ORDER BY a, b", params)
                rows = cur.fetchall()
                assert len(rows) <= 64
                seen += rows
    assert len(chunks) == 16
    assert seen == sorted(seen) and len(seen) == len(set(seen)) == 1000


@pytest.mark.e2e
def test_bootstrap_of_a_prefilled_table_with_live_changes_ends_equal(tap_env) -> None:
    env = tap_env
    with env.server.root(env.database) as conn:
        Workload.create(conn)
        Workload(conn, seed=3).run(700)  # before the tap ever ran
        env.add_jobs()
        live = Workload(env.server.root(env.database), seed=4)
        writer = threading.Thread(target=live.run, args=(500, 0.01))
        writer.start()  # changes go on during the bootstrap
        try:
            for table in ("orders", "order_lines"):
                done = subprocess.run(
                    [sys.executable, "-m", "python_ingest.cli", "--config", str(env.config),
                     "bootstrap", env.source, f"{env.database}.{table}", "--workers", "2",
                     "--chunk-rows", "300"], cwd=REPO, capture_output=True, text=True,
                    timeout=300)
                assert done.returncode == 0, done.stdout + done.stderr
                assert "chunks" in done.stdout and "rows/s" in done.stdout
            tap = env.start_tap()
            writer.join()
            Workload(conn, seed=5).run(100)  # and after the hand-over
            env.wait_caught_up()
            env.stop_tap(tap)
        finally:
            writer.join()
            env.close()
    assert env.assert_equal("orders") > 200
    assert env.assert_equal("order_lines") > 400
