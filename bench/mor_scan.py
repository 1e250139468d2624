"""What a merge-on-read lake's full scan pays for the log files of one batch: where the rest of
`make bench-services`' ratio goes (#11).

One bucket lake as sluice creates it (Hudi's simple bucket index on ``_row_key``, default 4
buckets, no metadata table) of N rows (default 1M) and 17 columns of mixed types, filled and
compacted; then one upsert of 100 random keys, which appends a log file to every bucket. The
same full scan (``count(*), sum(hash(*))``: every column of every row, best of 3) is timed:

  compacted     base files only (sluice's sessions: Hudi's 0.x reader)
  logs          after the upsert: every file slice is read row by row and merged with its
                log records by key
  skip_merge    the same files, the log records appended instead of merged (wrong answers:
                it splits the reader's row path from its key merge)
  ro            the read-optimized view (base files only, the last compaction's rows)
  fg_compacted, fg_logs   both states through Hudi 1.0's file group reader (position-based
                merging on, the upsert having written record positions)

The lake is compacted once more at the end and scanned again (``compacted_again``), which
shows how much the figures move between two scans of the same layout. Ends with one line
(wrapped here):
  mor-scan: rows=<n> compacted=<s> logs=<s> skip_merge=<s> ro=<s> fg_compacted=<s>
            fg_logs=<s> ratio=<logs/compacted>

    .venv/bin/python bench/mor_scan.py [--rows 1000000] [--buckets 4]
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from lakefill import full_scan  # noqa: E402  (bench/, beside this file)

COLUMNS = ("_row_key string, _ref_key bigint, d0 double, d1 double, d2 double, d3 double, "
           "d4 double, d5 double, s0 string, s1 string, s2 string, s3 string, s4 string, "
           "s5 string, b0 boolean, ts0 timestamp, m0 decimal(10,2), _hoodie_is_deleted boolean")
VALUES = ", ".join([f"cast(id * {i} % 1000 as double)" for i in range(6)]
                   + [f"concat('name-', id % {97 + i})" for i in range(6)]
                   + ["id % 3 = 0", "current_timestamp()", "cast(id % 10000 as decimal(10,2))"])
READER = "hoodie.file.group.reader.enabled"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="lake rows (1M)")
    parser.add_argument("--buckets", type=int, default=4, help="bucket count (4)")
    args = parser.parse_args()

    import yaml

    from python_ingest.config import load_settings
    from python_ingest.runtime.session import build_session

    work = Path(tempfile.mkdtemp(prefix="sluice-mor-scan-"))
    config = work / "sluice.yml"
    config.write_text(yaml.safe_dump({
        "spark": {"conf": {"spark.driver.memory": "3g"}},
        "catalog": {"warehouse": str(work / "wh")}, "jobs": {}}))
    spark = build_session(load_settings(config, env={}))
    table = "lake.mor_scan"
    props = {"type": "mor", "primaryKey": "_row_key", "preCombineField": "_ref_key",
             "hoodie.record.merge.mode": "COMMIT_TIME_ORDERING",
             "hoodie.index.type": "BUCKET", "hoodie.index.bucket.engine": "SIMPLE",
             "hoodie.bucket.index.num.buckets": str(args.buckets),
             "hoodie.bucket.index.hash.field": "_row_key", "hoodie.metadata.enable": "false"}
    try:
        for key, value in props.items():  # the write settings sluice keeps for a bucket lake
            if key.startswith("hoodie.index") or key.startswith("hoodie.bucket") \
                    or key == "hoodie.metadata.enable":
                spark.conf.set(key, value)
        spark.sql(f"create table {table} ({COLUMNS}) using hudi location '{work}/wh/lake/"
                  f"mor_scan' tblproperties ("
                  + ", ".join(f"'{k}'='{v}'" for k, v in props.items()) + ")")
        spark.conf.set("hoodie.spark.sql.insert.into.operation", "insert")
        start = time.perf_counter()
        spark.sql(f"insert into {table} select cast(id as string), 1, {VALUES}, false "
                  f"from range({args.rows})")
        _compact(spark, table)
        print(f"  filled and compacted {table} ({args.rows} rows) in "
              f"{time.perf_counter() - start:.1f} s", flush=True)
        figures = {"compacted": _scan(spark, table),
                   "fg_compacted": _scan(spark, table, file_group_reader=True)}
        spark.conf.set("hoodie.spark.sql.insert.into.operation", "upsert")
        spark.conf.set("hoodie.write.record.positions", "true")
        keys = ", ".join(map(str, random.Random(2).sample(range(args.rows), 100)))
        spark.sql(f"insert into {table} select cast(id as string), 2, {VALUES}, false "
                  f"from range({args.rows}) where id in ({keys})")
        figures["logs"] = _scan(spark, table)
        figures["fg_logs"] = _scan(spark, table, file_group_reader=True)
        for name, option in (("skip_merge", {"hoodie.datasource.merge.type": "skip_merge"}),
                             ("ro", {"hoodie.datasource.query.type": "read_optimized"})):
            spark.read.format("hudi").options(**option).load(f"{work}/wh/lake/mor_scan") \
                .createOrReplaceTempView(name)
            figures[name] = _scan(spark, name)
        _compact(spark, table)
        figures["compacted_again"] = _scan(spark, table)
        print(f"  {figures}", flush=True)
        print(f"mor-scan: rows={args.rows} compacted={figures['compacted']:.2f} "
              f"logs={figures['logs']:.2f} skip_merge={figures['skip_merge']:.2f} "
              f"ro={figures['ro']:.2f} fg_compacted={figures['fg_compacted']:.2f} "
              f"fg_logs={figures['fg_logs']:.2f} "
              f"ratio={figures['logs'] / figures['compacted']:.2f}")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def _compact(spark: Any, table: str) -> None:
    spark.sql(f"call run_compaction(op => 'scheduleandexecute', table => '{table}')").collect()


def _scan(spark: Any, table: str, file_group_reader: bool = False) -> float:
    """Best of three full scans of ``table``, in seconds (with Hudi 1.0's file group reader
    and position-based merging when ``file_group_reader``)."""
    before = spark.conf.get(READER, None)
    spark.conf.set(READER, str(file_group_reader).lower())
    spark.conf.set("hoodie.merge.use.record.positions", str(file_group_reader).lower())
    try:
        return full_scan(spark, table)
    finally:
        spark.conf.set(READER, before or "false")
        spark.conf.unset("hoodie.merge.use.record.positions")


if __name__ == "__main__":
    main()
