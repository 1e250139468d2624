"""The consistent snapshot: a slot created with an exported snapshot, tables copied in chunks
under it while writers go on, then the stream from the slot's consistent point; no change lost
or doubled (the topic's oracle equals the table)."""

from __future__ import annotations

import threading
import time

import pytest

from tests.sources.postgres.workload import PgWorkload

pytestmark = pytest.mark.postgres_source


def _prefill(env, rows: int) -> None:
    conn = env.connect()
    PgWorkload.create(conn)
    with conn.cursor() as cur:
        cur.execute("INSERT INTO orders SELECT g, 'c' || g, g / 7.0, 'new', now() "
                    "FROM generate_series(1, %s) g", (rows,))
        cur.execute("INSERT INTO notes (note_id, title, body, tags, score) SELECT g, 't' || g, "
                    "repeat(md5(g::text), 100), ARRAY['a', 'b'], g / 3.0 "
                    "FROM generate_series(1, %s) g", (rows,))
    conn.close()


def test_snapshot_under_concurrent_writes_hands_over_exactly(pg_env) -> None:
    env = pg_env
    _prefill(env, 1000)
    env.add_jobs()
    workload = PgWorkload(env.connect, seed=5, first_id=100_000)
    stop = threading.Event()

    def write() -> None:
        for _ in range(300):  # at most: the snapshot is usually done sooner
            if stop.is_set():
                return
            workload.step()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        time.sleep(0.3)
        result = env.bootstrap_all(workers=3)  # the slot is new: created with the snapshot
        time.sleep(0.3)
    finally:
        stop.set()
        writer.join()
        workload.close()
    assert result.new_slot and result.rows["public.orders"] >= 800
    env.tap_until_end()
    assert env.assert_equal("orders") > 800
    assert env.assert_equal("notes") > 800
    # a later snapshot (the slot exists: a temporary one exports it) of a table with writes
    # the tap also streams: equal again
    workload = PgWorkload(env.connect, seed=6, first_id=200_000)
    workload.run(50)
    second = env.bootstrap_all("public.notes")
    workload.run(50)
    workload.close()
    assert not second.new_slot
    env.tap_until_end()
    assert env.assert_equal("orders") > 800
    assert env.assert_equal("notes") > 800
