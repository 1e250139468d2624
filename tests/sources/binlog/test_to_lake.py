"""The whole way: MariaDB → tap → Kafka → raw → staging → fork → lake, with the generic models
the scaffold writes, proven equal to the MariaDB tables at the end.

Each test runs the tap in its own process and the pipeline (python_ingest.steps.pipeline.run_all)
in this process, on the session's SparkSession, with a dbt project of its own beside its
sluice.yml (tests/tap/lake.py).
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time

import pytest
import yaml

from tests.conftest import REPO, sluice_cmd
from tests.sources.binlog.lake import (
    DOCS,
    DocsWorkload,
    assert_lake_equals_source,
    make_project,
    run_pipeline,
    scaffold,
)
from tests.sources.binlog.workload import Workload


def _writer(target: object, *args: object) -> threading.Thread:
    thread = threading.Thread(target=target, args=args)  # type: ignore[arg-type]
    thread.start()
    return thread


@pytest.mark.e2e
def test_random_workload_through_the_pipeline_ends_equal(tap_env, format_spark,
                                                         table_format) -> None:
    """On both table formats."""
    env, spark = tap_env, format_spark
    env.table_format = table_format
    make_project(env.tmp)
    env.write_config(exclude=[f"{env.database}.order_lines"])  # two jobs keep it short
    with env.server.root(env.database) as conn:
        Workload.create(conn)
        env.sql(DOCS)
        # the scaffold as users run it: one command writes models, suites and jobs
        done = sluice_cmd(env.config, "tap", env.source, "--scaffold")
        assert done.returncode == 0, done.stdout + done.stderr
        env.jobs = yaml.safe_load(env.config.read_text())["jobs"]
        # a job per table, and the one of the source's error records (<source>__tap_errors)
        assert len(env.jobs) == 3 and "jobs added" in done.stdout, done.stdout
        assert f"{env.source}__tap_errors" in env.jobs
        assert "row key primary key (id): the table's primary key" in done.stdout
        again = sluice_cmd(env.config, "tap", env.source, "--scaffold")
        assert "kept 10 existing file(s)" in again.stdout, again.stdout
        assert "none (all present)" in again.stdout, again.stdout
        env.tap_until_end()
        tap = env.start_tap()
        try:
            orders = Workload(conn, seed=31)
            writers = [_writer(orders.run, 300, 0.08),
                       _writer(DocsWorkload(env.server.root(env.database), seed=32).run, 300,
                               0.08)]
            first = run_pipeline(spark, env)  # while the workload goes on
            for writer in writers:
                writer.join()
            orders.run(10)  # the last run has some to merge, however fast the first one was
            env.wait_caught_up()
            env.stop_tap(tap)
        finally:
            for writer in writers:
                writer.join()
            env.close()
    last = run_pipeline(spark, env)
    # the first run met the workload midway, the last one had the rest to merge
    assert sum(r.counts["read"] for r in first) > 0 and sum(r.counts["read"] for r in last) > 0
    assert all(r.counts.get("merge_errors", 0) == 0 for r in first + last)
    assert assert_lake_equals_source(spark, env, "orders") > 30
    assert assert_lake_equals_source(spark, env, "docs", json_columns=("attrs",)) > 20


@pytest.mark.e2e
def test_tap_and_pipeline_killed_at_random_moments_end_equal(tap_env, spark) -> None:
    env = tap_env
    rng = random.Random(47)
    make_project(env.tmp)
    with env.server.root(env.database) as conn:
        env.sql(DOCS)
        scaffold(env)
        env.tap_until_end()
        workload = DocsWorkload(conn, seed=48)
        kills = env.kill_taps_during(lambda: workload.run(300, 0.03), rng, (0.2, 1.5))
        # the pipeline: `sluice run --all` in its own process, SIGKILLed at a random moment
        # (after its JVM started: in ingest, staging, fork or merge), then run again here
        pipeline = subprocess.Popen([sys.executable, "-m", "python_ingest.cli", "--config",
                                     str(env.config), "run", "--all"], cwd=REPO,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(10, 18))
        assert pipeline.poll() is None, "the pipeline finished before it could be killed"
        pipeline.send_signal(signal.SIGKILL)
        pipeline.wait()
        DocsWorkload(conn, seed=49, first_id=10_000).run(100)
        env.tap_until_end()
    run_pipeline(spark, env)
    assert kills >= 2
    assert assert_lake_equals_source(spark, env, "docs", json_columns=("attrs",)) > 20


@pytest.mark.e2e
def test_bootstrap_of_a_prefilled_table_then_live_changes_ends_equal(tap_env, spark) -> None:
    env = tap_env
    make_project(env.tmp)
    with env.server.root(env.database) as conn:
        env.sql(DOCS)
        DocsWorkload(conn, seed=61).run(300)  # before the tap ever ran
        scaffold(env)
        from python_ingest.sources.binlog.bootstrap import bootstrap

        settings = env.settings()
        bootstrap(settings, settings.source(env.source), f"{env.database}.docs", workers=2,
                  chunk_rows=50, progress=lambda line: None)
        run_pipeline(spark, env)  # the snapshot alone reaches the lake
        assert assert_lake_equals_source(spark, env, "docs", json_columns=("attrs",)) > 50
        DocsWorkload(conn, seed=62, first_id=10_000).run(150)
        env.tap_until_end()
    run_pipeline(spark, env)
    assert assert_lake_equals_source(spark, env, "docs", json_columns=("attrs",)) > 50


@pytest.mark.e2e
def test_added_column_mid_stream_reaches_the_lake_and_ends_equal(tap_env, spark) -> None:
    env = tap_env
    make_project(env.tmp)
    env.write_config(exclude=[f"{env.database}.order_lines"])  # one job keeps it short
    with env.server.root(env.database) as conn:
        Workload.create(conn)
        scaffold(env)
        env.tap_until_end()
        workload = Workload(conn, seed=71)
        workload.run(80)
        env.tap_until_end()
        run_pipeline(spark, env)  # lake tables exist with the first shape
        env.sql("ALTER TABLE orders ADD COLUMN coupon VARCHAR(20) NULL, "
                "ADD COLUMN discount DECIMAL(5,2) NULL")
        env.sql("UPDATE orders SET coupon = 'SPRING-ß', discount = 2.50 WHERE id % 3 = 0")
        workload.run(60)  # inserts without the new columns, updates of old rows
        env.sql("INSERT INTO orders (customer, amount, status, updated_at, coupon) "
                "VALUES ('Zoë', 1.00, 'new', '2024-01-01', 'NEW')")
        env.tap_until_end()
    run_pipeline(spark, env)
    job = next(n for n, j in env.jobs.items() if j["topic"] == env.topic("orders"))
    # (the staging and valid tables keep the first batch's columns: later batches take the
    # batch path, which writes neither)
    for table in (f"raw.{job}", f"lake.{job}"):
        assert {"coupon", "discount"} <= set(spark.table(table).columns), table
    assert assert_lake_equals_source(spark, env, "orders") > 20
    coupons = {r["coupon"] for r in spark.table(f"lake.{job}").collect()}
    assert {"SPRING-ß", "NEW", None} <= coupons
