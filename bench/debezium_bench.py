"""Debezium against sluice's own tap: the same row changes captured by each, then each topic
through the whole pipeline to its lake table.

Starts a private MariaDB, the embedded broker and a Kafka Connect standalone worker with
Debezium's MariaDB connector (JSON, as in tests/sources/debezium/test_connect.py), in
temporary folders, then:

1. fills ``bench.items`` with N rows outside the binlog, starts the connector (``no_data``: it
   streams from the binlog's end) and pauses it;
2. writes N row changes (multi-row UPDATEs, 10k rows each) to the binlog;
3. ``dbz_capture``: resumes the connector; row changes/s until its topic holds all N;
4. ``tap_capture``: ``sluice tap`` (Tap.run until the binlog's end) over the same stretch;
5. ``dbz_to_lake`` and ``tap_to_lake``: each topic's job scaffolded (``sluice debezium
   scaffold``, ``sluice tap --scaffold``) and run once (ingest, converter, fork, merge) on
   one SparkSession: row changes/s of each run.

Prints last: ``debezium: changes=N dbz_capture=R tap_capture=R dbz_to_lake=R tap_to_lake=R``
(R in row changes per second). Run with ``make bench-debezium``; ``--changes`` scales it.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_settings, fill_items  # noqa: E402
from python_ingest.config import load_settings  # noqa: E402
from python_ingest.kafka import broker  # noqa: E402
from python_ingest.kafka.client import partition_offsets  # noqa: E402
from python_ingest.runtime import connect  # noqa: E402
from python_ingest.sources.binlog import server  # noqa: E402
from python_ingest.sources.binlog.position import (  # noqa: E402
    BinlogCheckpoint,
    BinlogCheckpointStore,
)
from python_ingest.sources.binlog.server import LocalServer  # noqa: E402
from python_ingest.sources.binlog.tap import Tap  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def messages(bootstrap: str, topic: str) -> int:
    try:
        return sum(p.end - p.earliest for p in partition_offsets(bootstrap, topic))
    except Exception:  # noqa: BLE001  # the topic does not exist yet
        return 0


def rest(worker: connect.ConnectWorker, method: str, path: str) -> None:
    request = urllib.request.Request(f"{worker.rest}{path}", method=method)
    with urllib.request.urlopen(request, timeout=10):
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=200_000, help="row changes (and rows)")
    parser.add_argument("--no-lake", action="store_true", help="capture only (no Spark)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    n = args.changes
    with tempfile.TemporaryDirectory(prefix="sluice-dbz-bench-") as tmp:
        work = Path(tmp)
        for name in ("dbt_project.yml", "profiles.yml"):
            shutil.copy(REPO / name, work / name)
        (work / "macros").symlink_to(REPO / "macros")
        db = LocalServer(work / "mariadb").start()
        settings = bench_settings(
            work, db.source_config(include=["bench.*"], checkpoint_interval_s=1.0),
            spark={"master": "local[2]"},
            catalog={"name": "sluice", "type": "hadoop", "warehouse": str(work / "wh")})
        bootstrap = settings.broker.bootstrap_servers
        config = work / "sluice.yml"
        source = settings.source("bench")
        broker.start(settings)
        worker = None
        try:
            with db.root() as conn, conn.cursor() as cur:
                fill_items(cur, n)
                cur.execute("CREATE USER 'dbz'@'127.0.0.1' IDENTIFIED BY 'dbz-secret'")
                cur.execute("GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, "
                            "BINLOG MONITOR, LOCK TABLES ON *.* TO 'dbz'@'127.0.0.1'")
            worker = connect.start_standalone(work / "connect", bootstrap, [{
                "name": "bench",
                "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
                "tasks.max": 1, "database.hostname": "127.0.0.1", "database.port": db.port,
                "database.user": "dbz", "database.password": "dbz-secret",
                "database.server.id": 5499, "topic.prefix": "dbz",
                "database.include.list": "bench", "snapshot.mode": "no_data",
                "schema.history.internal": "io.debezium.storage.file.history.FileSchemaHistory",
                "schema.history.internal.file.filename": str(work / "history.dat"),
                # batches as large as the tap's, no idle wait between polls
                "max.batch.size": 10_000, "max.queue.size": 40_000, "poll.interval.ms": 10}],
                worker={"producer.linger.ms": 20, "producer.batch.size": 262_144,
                        "producer.compression.type": "lz4"},
                heap="768m")
            time.sleep(3)  # streaming from the binlog's end
            rest(worker, "PUT", "/connectors/bench/pause")
            time.sleep(2)
            with db.root() as conn, conn.cursor() as cur:
                start = server.master_position(conn)
                step = 10_000
                for low in range(0, n, step):
                    cur.execute("UPDATE bench.items SET qty = qty + 1, updated_at = NOW(6) "
                                f"WHERE id > {low} AND id <= {low + step}")
            print(f"wrote {n} row changes to the binlog")
            topic = "dbz.bench.items"
            began = time.monotonic()
            rest(worker, "PUT", "/connectors/bench/resume")
            while messages(bootstrap, topic) < n:  # (a look costs a consumer: once a second)
                time.sleep(1)
                if time.monotonic() - began > 1800:
                    raise SystemExit(f"Debezium delivered {messages(bootstrap, topic)} of {n}")
            dbz_capture = n / (time.monotonic() - began)
            print(f"Debezium (Kafka Connect, JSON): {n} changes at {dbz_capture:,.0f}/s")
            worker.stop()
            worker = None

            BinlogCheckpointStore(settings.path(settings.state_dir), "bench").save(
                BinlogCheckpoint(start))
            began = time.monotonic()
            stats = Tap(settings, source).run(until_end=True)
            tap_capture = stats.row_changes / (time.monotonic() - began)
            print(f"sluice tap (Avro): {stats.row_changes} changes at {tap_capture:,.0f}/s")

            dbz_to_lake = tap_to_lake = 0.0
            if not args.no_lake:
                dbz_to_lake, tap_to_lake = to_lake(config, topic, n)
            print(f"debezium: changes={n} dbz_capture={dbz_capture:.0f} "
                  f"tap_capture={tap_capture:.0f} dbz_to_lake={dbz_to_lake:.0f} "
                  f"tap_to_lake={tap_to_lake:.0f}")
        finally:
            if worker is not None:
                worker.stop()
            broker.stop(settings)
            db.stop()
    return 0


def to_lake(config: Path, topic: str, n: int) -> tuple[float, float]:
    """Scaffold both jobs, then run each once through the whole pipeline: changes/s each."""
    from python_ingest.runtime.session import build_session
    from python_ingest.scaffold.dbt import scaffold as scaffold_tap
    from python_ingest.scaffold.debezium import scaffold as scaffold_dbz
    from python_ingest.steps.pipeline import run_all

    settings = load_settings(config, env={})
    dbz_job = scaffold_dbz(settings, [topic], config.parent, config, value_format="json",
                           say=None, job_prefix="dbz_").jobs_added[0]
    tap_job = next(name for name in scaffold_tap(settings, settings.source("bench"),
                                                 config.parent, config, say=None).jobs_added
                   if name.endswith("bench_items"))
    settings = load_settings(config, env={})
    spark = build_session(settings)
    rates = []
    for job in (dbz_job, tap_job):
        began = time.monotonic()
        result = run_all(spark, settings, [job])[0]
        seconds = time.monotonic() - began
        rows = spark.table(f"lake.{job}").count()
        print(f"{job}: {result.counts.get('read')} read, lake {rows} rows in {seconds:.1f}s")
        rates.append(n / seconds)
    spark.stop()
    return rates[0], rates[1]


if __name__ == "__main__":
    sys.exit(main())
