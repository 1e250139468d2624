"""Verify benchmark: a 1M-row MariaDB table and its lake copy, compared by `sluice verify`.

Both sides are filled with the same rows computed by the same formulas (MariaDB's sequence
engine, Spark's range), so the lake copy is exact without running the pipeline. Measured in
the same run:
  scan_s      a full scan of both sides reading every column (MariaDB, then Spark): the floor
  equal_s     `verify` of the equal tables (no row is fetched)
  one_diff_s  `verify` after one column of one lake row was changed; rows_moved is how many
              rows it fetched to find it
Prints, last:
  verify: rows=<n> equal_s=<s> scan_s=<s> ratio=<equal_s/scan_s> one_diff_s=<s> rows_moved=<n>
Goal: ratio <= 1.5 and rows_moved <= 1000.

    .venv/bin/python bench/verify_bench.py [--rows 1000000]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

from bench.common import lake_settings
from python_ingest.config import JobConfig
from python_ingest.runtime.session import build_session
from python_ingest.sources.binlog.server import LocalServer
from python_ingest.verify.run import verify

REPO = Path(__file__).resolve().parent.parent

# one row: the same values on both sides, from the row number n
SOURCE_COLUMNS = ("seq, CONCAT('item ', seq), seq * 7 / 100, seq % 97, "
                  "TIMESTAMP('2024-01-01') + INTERVAL seq SECOND, "
                  "IF(seq % 3 = 0, NULL, CONCAT('note ü ', seq % 1000))")
LAKE_COLUMNS = ("cast(id as int) as id, concat('item ', id) as name, "
                "cast(id * 7 / 100 as decimal(12, 2)) as amount, cast(id % 97 as int) as qty, "
                "timestamp('2024-01-01') + make_interval(0, 0, 0, 0, 0, 0, id) as updated_at, "
                "if(id % 3 = 0, null, concat('note ü ', id % 1000)) as note, "
                "cast(id as bigint) as _ref_key, false as _is_deleted")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="sluice-verify-bench-") as tmp:
        work = Path(tmp)
        db = LocalServer(work / "mariadb").start()
        try:
            settings = lake_settings(work, table_format="iceberg",  # its lake copy is Iceberg
                                     sources={"bench": db.source_config(include=["bench.*"])})
            job = JobConfig(name="bench_items", topic="bench.bench.items", schema=None,
                            row_key=("id",))
            began = time.monotonic()
            with db.root() as conn, conn.cursor() as cur:
                cur.execute("CREATE DATABASE bench")
                cur.execute("CREATE TABLE bench.items (id INT PRIMARY KEY, name VARCHAR(40), "
                            "amount DECIMAL(12,2), qty INT, updated_at DATETIME(6), "
                            "note VARCHAR(100))")
                cur.execute(f"INSERT INTO bench.items SELECT {SOURCE_COLUMNS} "
                            f"FROM bench.seq_1_to_{args.rows}")
            spark = build_session(settings)
            spark.sql("create table lake.bench_items using iceberg as select "
                      f"{LAKE_COLUMNS} from (select id + 1 as id from range({args.rows}))")
            print(f"filled {args.rows:,} rows on both sides in {time.monotonic() - began:.1f}s",
                  flush=True)

            began = time.monotonic()
            with db.root() as conn, conn.cursor() as cur:
                cur.execute("SELECT SUM(LENGTH(CONCAT_WS(',', id, name, amount, qty, "
                            "updated_at, note))) FROM bench.items")
                cur.fetchall()
            spark.sql("select sum(length(concat_ws(',', id, name, amount, qty, updated_at, "
                      "note))) from lake.bench_items").collect()
            scan_s = time.monotonic() - began
            print(f"scan of both sides: {scan_s:.2f}s", flush=True)

            equal = verify(spark, settings, job, "lake.bench_items", settle_s=0)
            assert equal.equal, equal.differences[:5]
            print(f"verify, equal: {equal.seconds:.2f}s ({equal.ranges_checked} ranges)",
                  flush=True)

            changed = args.rows // 2
            spark.sql(f"update lake.bench_items set qty = qty + 1 where id = {changed}")
            one = verify(spark, settings, job, "lake.bench_items", settle_s=0)
            keys = [(d.key, d.kind, d.columns) for d in one.differences]
            assert keys == [(str(changed), "differs", ["qty"])], keys
            print(f"verify, one changed row: {one.seconds:.2f}s, found {keys}, "
                  f"{one.ranges_checked} ranges checked, {one.rows_moved} rows fetched",
                  flush=True)
            print(f"verify: rows={args.rows} equal_s={equal.seconds:.2f} scan_s={scan_s:.2f} "
                  f"ratio={equal.seconds / scan_s:.2f} one_diff_s={one.seconds:.2f} "
                  f"rows_moved={one.rows_moved}")
            spark.stop()
        finally:
            db.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
