"""Issue #9.5: the tap's updates carry the whole after image, so they are upserts, and a
bootstrap while the tap runs and the table keeps changing is lossless.

One test proves both, through the real tap process, bootstrap, Kafka, Spark and dbt:

* an update of a row whose insert the fork rejected creates the row once the update fixes
  the bad value (before: a partial update of a row the lake lacks, rejected by the merge);
* an update committed right after a bootstrap chunk's snapshot, merged before that chunk's
  rows reach the lake, creates the row, and the older snapshot row does not overwrite it
  (before: rejected, and the snapshot row brought the old values back);
* another connection inserts, updates and deletes rows during the whole bootstrap: the lake
  table ends equal to the MariaDB table.
"""

from __future__ import annotations

import json
import random
import threading
import time
from typing import Any

import pytest

from python_ingest.sources.binlog import bootstrap as bootstrap_mod
from python_ingest.sources.binlog.position import BinlogPosition
from tests.sources.binlog.lake import (
    assert_lake_equals_source,
    job_of,
    lake_rows,
    make_project,
    run_pipeline,
    scaffold,
)

ROWS = 240  # rows before the tap ever ran: only the bootstrap publishes them
CHUNK_ROWS = 80


def _wait_published(env: Any, upto: tuple[str, int], timeout_s: float = 120) -> None:
    """Wait until the tap's saved checkpoint is at or past the binlog position ``upto``."""
    deadline = time.monotonic() + timeout_s
    while True:
        cp = env.checkpoint()
        if cp and (cp["file"], cp["pos"]) >= upto:
            return
        assert time.monotonic() < deadline, f"the tap did not reach {upto}: checkpoint {cp}"
        time.sleep(0.1)


class Mutator:
    """Inserts, updates and deletes rows of ``items`` from its own connection until stopped."""

    def __init__(self, env: Any, seed: int) -> None:
        self.env = env
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.paused = threading.Event()  # while the test merges in the middle of the bootstrap
        self.transactions = 0
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        next_id = 10_000
        with self.env.server.root(self.env.database) as conn, conn.cursor() as cur:
            while not self.stop.is_set():
                if self.paused.is_set():
                    time.sleep(0.05)
                    continue
                roll = self.rng.random()
                target = self.rng.randint(4, ROWS + 20)  # row 3 is the race's
                if roll < 0.2:
                    cur.execute("INSERT INTO items VALUES (%s, %s, 'new')",
                                (next_id, self.rng.randint(0, 99)))
                    next_id += 1
                elif roll < 0.8:
                    cur.execute("UPDATE items SET qty = %s, note = CONCAT('w', %s) "
                                "WHERE id = %s", (self.rng.randint(0, 99), self.transactions,
                                                  target))
                elif roll < 0.9:
                    cur.execute("DELETE FROM items WHERE id = %s", (target,))
                else:  # a deleted key comes back
                    cur.execute("INSERT IGNORE INTO items VALUES (%s, 7, 'again')", (target,))
                conn.commit()
                self.transactions += 1
                time.sleep(0.01)

    def __enter__(self) -> Mutator:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self.thread.join()


@pytest.mark.e2e
@pytest.mark.reliability
def test_updates_are_upserts_and_bootstrap_while_tapping_and_writing_is_lossless(
        tap_env: Any, spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    env = tap_env
    make_project(env.tmp)
    env.sql("CREATE TABLE items (id INT NOT NULL PRIMARY KEY, qty INT NOT NULL, "
            "note VARCHAR(40))",
            f"INSERT INTO items SELECT seq, seq MOD 50, 'old' FROM seq_1_to_{ROWS}")
    written = scaffold(env)
    env.jobs.update(written.error_job)
    env.write_config()
    job = job_of(env, "items")
    (suite,) = (env.tmp / "expectations").glob(f"*__{job}.json")
    rules = json.loads(suite.read_text())
    rules["expectations"].append({"type": "expect_column_values_to_be_between",
                                  "kwargs": {"column": "qty", "min_value": 0}})
    suite.write_text(json.dumps(rules))
    tap = env.start_tap()  # from the binlog's current end: the ROWS rows are not in it
    try:
        mutator = Mutator(env, seed=95)
        raced: list[BinlogPosition] = []
        take_snapshot = bootstrap_mod._snapshot_position

        def snapshot_then_race(conn: Any, kind: str) -> BinlogPosition:
            """After the first chunk's snapshot: update one of its rows and merge that update
            before the chunk's rows are published."""
            position = take_snapshot(conn, kind)
            if not raced:
                raced.append(position)
                env.sql("UPDATE items SET note = 'after the snapshot' WHERE id = 3")
                _wait_published(env, env.master())
                mutator.paused.set()
                run_pipeline(spark, env)
                mutator.paused.clear()
            return position

        monkeypatch.setattr(bootstrap_mod, "_snapshot_position", snapshot_then_race)
        settings = env.settings()
        with mutator:
            result = bootstrap_mod.bootstrap(settings, settings.source(env.source),
                                             f"{env.database}.items", workers=1,
                                             chunk_rows=CHUNK_ROWS, progress=lambda _l: None)
            time.sleep(0.3)  # and a little after the hand-over
        assert raced and result.chunks >= 3 and mutator.transactions > 20
        # an insert the fork rejects (qty < 0), then an update that makes the row valid
        env.sql("INSERT INTO items VALUES (5000, -1, 'bad')",
                "UPDATE items SET qty = 5 WHERE id = 5000")
        env.wait_caught_up()
        env.stop_tap(tap)
    finally:
        env.close()
    run_pipeline(spark, env)
    assert assert_lake_equals_source(spark, env, "items") > ROWS / 2
    lake = lake_rows(spark, env, "items")
    assert lake["5000"]["qty"] == 5
    if env.sql("SELECT note FROM items WHERE id = 3") == [("after the snapshot",)]:
        assert lake["3"]["note"] == "after the snapshot"
    errors = spark.table(f"errors.{job}").groupBy("error_step").count().collect()
    assert {r["error_step"]: r["count"] for r in errors} == {"fork": 1}  # only the bad insert
