"""Bootstrap bench (issue #62): a large MariaDB table's first load, three ways, in one run.

A private MariaDB holds ``bench.items`` (the tap bench's row shape plus text and decimal
columns), filled outside the binlog, and ``bench.items_head``, its first ``--stream-rows``
rows. Measured:

- direct: ``sluice bootstrap bench bench.items --direct`` (steps/bootstrap.py): chunks read by
  Spark tasks, converter and suite, the lake written as all inserts, the index built in bulk;
- stream: today's road on ``bench.items_head``: the Kafka bootstrap (chunks published to the
  topic), then ``sluice run`` of its job until every row is merged into its lake;
- limit: Spark alone on ``bench.items``: a partitioned JDBC read (MariaDB's driver, one
  partition per core times two, by id) and a bulk_insert into a Hudi table; no sluice logic.

Prints last: ``bootstrap: rows=N direct_rows_s=R stream_rows_s=R speedup=X limit_rows_s=R
of_limit=Y`` (speedup = direct / stream, of_limit = direct / limit).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_settings  # noqa: E402
from python_ingest.kafka import broker  # noqa: E402
from python_ingest.sources.binlog.server import LocalServer  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
WIDE = ("CREATE TABLE bench.{name} (id INT PRIMARY KEY, name VARCHAR(40), amount DECIMAL(10,2), "
        "qty INT, updated_at DATETIME(6), note VARCHAR(100), body TEXT, "
        "price DECIMAL(18,4), tax DECIMAL(7,3), label VARCHAR(30))")


def fill(cur: Any, rows: int, head: int) -> float:
    """``bench.items`` with ``rows`` rows and ``bench.items_head`` with its first ``head``,
    written outside the binlog; the seconds it took."""
    began = time.monotonic()
    cur.execute("CREATE DATABASE bench")
    for name in ("items", "items_head"):
        cur.execute(WIDE.format(name=name))
    cur.execute("SET SESSION sql_log_bin = 0")
    step = 1_000_000
    for low in range(0, rows, step):
        cur.execute(
            "INSERT INTO bench.items SELECT seq, CONCAT('item ', seq), seq / 100, seq % 97, "
            "TIMESTAMP'2026-01-01 00:00:00' - INTERVAL seq SECOND, "
            "IF(seq % 3 = 0, NULL, 'ünïcode note'), REPEAT(CONCAT('text ', seq % 10, ' '), 8), "
            "seq * 1.2345, (seq % 1000) / 7, CONCAT('label-', seq % 50) "
            f"FROM bench.seq_{low + 1}_to_{min(low + step, rows)}")
    cur.execute(f"INSERT INTO bench.items_head SELECT * FROM bench.items WHERE id <= {head}")
    cur.execute("SET SESSION sql_log_bin = 1")
    return time.monotonic() - began


def project(work: Path) -> None:
    """A dbt project beside the bench's sluice.yml (the scaffold writes its models)."""
    for name in ("dbt_project.yml", "profiles.yml"):
        shutil.copy(REPO / name, work / name)
    (work / "macros").symlink_to(REPO / "macros")


def stream(spark: Any, settings: Any, source: Any, job: str) -> tuple[int, float]:
    """Today's road on bench.items_head: Kafka bootstrap, then runs until merged."""
    from python_ingest.sources.binlog.bootstrap import bootstrap
    from python_ingest.steps.pipeline import run_job

    began = time.monotonic()
    result = bootstrap(settings, source, "bench.items_head", progress=lambda line: None)
    while True:
        run = run_job(spark, settings, settings.job(job))
        if run.outcome == "up-to-date":
            break
    return result.rows, time.monotonic() - began


def limit(spark: Any, db: LocalServer, rows: int, work: Path) -> float:
    """Spark alone: partitioned JDBC read of bench.items, bulk_insert into a Hudi table."""
    began = time.monotonic()
    parts = 2 * spark.sparkContext.defaultParallelism
    frame = spark.read.format("jdbc").options(
        url=f"jdbc:mariadb://127.0.0.1:{db.port}/bench", dbtable="items",
        user=db.tap_user, password=db.tap_password, driver="org.mariadb.jdbc.Driver",
        partitionColumn="id", lowerBound="1", upperBound=str(rows + 1),
        numPartitions=str(parts), fetchsize="10000",
        # Spark quotes names with "..." for a jdbc:mariadb URL (no dialect of its own)
        sessionInitStatement="SET SESSION sql_mode = CONCAT(@@sql_mode, ',ANSI_QUOTES')").load()
    (frame.write.format("hudi")
     .option("hoodie.table.name", "limit_items")
     .option("hoodie.datasource.write.recordkey.field", "id")
     .option("hoodie.datasource.write.precombine.field", "id")
     .option("hoodie.datasource.write.operation", "bulk_insert")
     .option("hoodie.datasource.write.table.type", "MERGE_ON_READ")
     .option("hoodie.metadata.enable", "false")
     .mode("overwrite").save(str(work / "limit_items")))
    return time.monotonic() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="rows of bench.items")
    parser.add_argument("--stream-rows", type=int, default=1_000_000,
                        help="rows today's road carries (bench.items_head)")
    parser.add_argument("--chunk-rows", type=int, default=250_000)
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    head = min(args.stream_rows, args.rows)
    tmp = tempfile.mkdtemp(prefix="sluice-bootstrap-bench-")
    work = Path(tmp)
    db = LocalServer(work / "mariadb").start()
    settings = bench_settings(work, db.source_config(include=["bench.*"],
                                                     bootstrap_chunk_rows=args.chunk_rows),
                              spark={"master": "local[2]"},
                              catalog={"warehouse": str(work / "warehouse")})
    try:
        return _run(args, work, db, settings, head)
    finally:
        db.stop()
        broker.stop(settings)
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


def _run(args: argparse.Namespace, work: Path, db: LocalServer, settings: Any,
         head: int) -> int:
    from python_ingest.cli.progress import printer
    from python_ingest.config import load_settings
    from python_ingest.runtime.session import build_session
    from python_ingest.scaffold.dbt import scaffold
    from python_ingest.steps.bootstrap import direct_bootstrap

    with db.root() as conn, conn.cursor() as cur:
        print(f"filled bench.items ({args.rows} rows) and bench.items_head ({head}) in "
              f"{fill(cur, args.rows, head):.1f}s")
    broker.start(settings)
    project(work)
    scaffold(settings, settings.source("bench"), work, work / "sluice.yml", say=None)
    settings = load_settings(work / "sluice.yml", env={})
    source = settings.source("bench")
    spark = build_session(settings)
    jobs = {j.topic.rsplit(".", 1)[-1]: name for name, j in settings.jobs.items()}

    show, began = printer(sys.stdout), time.monotonic()
    result = direct_bootstrap(spark, settings, source, "bench.items", args.chunk_rows,
                              progress=lambda line: show(f"[{time.monotonic() - began:6.1f}s] "
                                                         f"{line}"))
    direct = result.rows / result.seconds
    print(f"direct: {result.rows} rows in {result.seconds:.1f}s = {direct:,.0f} rows/s")

    streamed, seconds = stream(spark, settings, source, jobs["items_head"])
    stream_rate = streamed / seconds
    print(f"stream (Kafka bootstrap + sluice run): {streamed} rows in {seconds:.1f}s = "
          f"{stream_rate:,.0f} rows/s")

    seconds = limit(spark, db, args.rows, work)
    limit_rate = args.rows / seconds
    print(f"limit (Spark JDBC read + Hudi bulk_insert): {args.rows} rows in {seconds:.1f}s = "
          f"{limit_rate:,.0f} rows/s")
    print(f"bootstrap: rows={result.rows} direct_rows_s={direct:.0f} "
          f"stream_rows_s={stream_rate:.0f} speedup={direct / stream_rate:.2f} "
          f"limit_rows_s={limit_rate:.0f} of_limit={direct / limit_rate:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
