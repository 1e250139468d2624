"""Ways to apply one change set to a Hudi merge-on-read lake table: where #18's merge gap is.

Three tables of the same N rows (default 1M; `_row_key`, `_ref_key`, a payload, `_is_deleted`),
then the same 10k changes (5k updates of random keys, 4k inserts, 1k deletes) applied to each,
twice (cold, then warm with 10k updates):

  merge_rli      SQL MERGE INTO, record-level index in the metadata table (sluice's lake today)
  upsert_rli     DataFrame upsert (deletes flagged ``_hoodie_is_deleted``), the same index
  upsert_bucket  DataFrame upsert into a table with the simple bucket index (8 buckets hashed
                 on ``_row_key``) and no metadata table: no index look-up, no second commit
  merge_bucket   SQL MERGE INTO the bucket table: checked for rows, since on Hudi 1.0.2 its
                 ``when not matched then insert`` inserted nothing in a first try

Every table's row count is checked against the expected one. Ends with one line:
  hudi-merge-paths: rows=<n> merge_rli=<s> upsert_rli=<s> upsert_bucket=<s> merge_bucket=<s>
                    merge_bucket_rows_ok=<true|false>
(seconds: the warm application; one line, wrapped here).

    .venv/bin/python bench/hudi_merge_paths.py [--rows 1000000]
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

LAKE = {"type": "mor", "primaryKey": "_row_key", "preCombineField": "_ref_key",
        "hoodie.record.merge.mode": "COMMIT_TIME_ORDERING", "hoodie.compact.inline": "false"}
RLI = {**LAKE, "hoodie.metadata.record.index.enable": "true", "hoodie.index.type": "RECORD_INDEX",
       "hoodie.metadata.index.column.stats.enable": "false",
       "hoodie.metadata.index.partition.stats.enable": "false"}
BUCKET = {**LAKE, "hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": "8",
          "hoodie.bucket.index.hash.field": "_row_key", "hoodie.metadata.enable": "false"}
TABLES = {"rli_merge": RLI, "rli_upsert": RLI, "bucket_upsert": BUCKET, "bucket_merge": BUCKET}
CHANGES = "_row_key string, _ref_key bigint, v string, _is_deleted boolean, _merge_action string"
MERGE = """merge into {table} as lake using (select * from meta.changes) as c
  on lake._row_key = c._row_key
  when matched and c._merge_action = 'delete' then delete
  when matched and c._merge_action = 'update' then update set _row_key = c._row_key,
    _ref_key = c._ref_key, v = c.v, _is_deleted = c._is_deleted
  when not matched and c._merge_action = 'insert' then insert
    (_row_key, _ref_key, v, _is_deleted) values (c._row_key, c._ref_key, c.v, c._is_deleted)"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    rows = parser.parse_args().rows

    import yaml

    from python_ingest.config import load_settings
    from python_ingest.runtime.session import build_session

    work = Path(tempfile.mkdtemp(prefix="sluice-hudi-merge-"))
    config = work / "sluice.yml"
    config.write_text(yaml.safe_dump({"catalog": {"warehouse": str(work / "wh")}, "jobs": {}}))
    spark = build_session(load_settings(config, env={}))
    try:
        for name, props in TABLES.items():
            fill(spark, work, name, props, rows)
        rng = random.Random(3)
        keys = rng.sample(range(rows), 6_000)
        first = [(str(k), 2, f"u{k}", False, "update") for k in keys[:5_000]]
        first += [(str(rows + i), 2, f"n{i}", False, "insert") for i in range(4_000)]
        first += [(str(k), 2, None, True, "delete") for k in keys[5_000:]]
        gone = set(keys[5_000:])
        second = [(str(k), 3, f"w{k}", False, "update")
                  for k in rng.sample([k for k in range(rows) if k not in gone], 10_000)]
        seconds: dict[str, float] = {}
        for label, changes in (("cold", first), ("warm", second)):
            spark.createDataFrame(changes, CHANGES).write.mode("overwrite") \
                .saveAsTable("meta.changes")
            for name in TABLES:
                start = time.perf_counter()
                apply(spark, work, name)
                seconds[name] = time.perf_counter() - start
                print(f"  {label} {name}: {seconds[name]:.2f} s", flush=True)
        expected = rows + 4_000 - 1_000
        counts = {n: spark.table(f"lake.{n}").count() for n in TABLES}
        print(f"  rows: {counts} (expected {expected})", flush=True)
        for name in ("rli_merge", "rli_upsert", "bucket_upsert"):
            if counts[name] != expected:
                raise SystemExit(f"{name} holds {counts[name]} rows, not {expected}")
        print(f"hudi-merge-paths: rows={rows} merge_rli={seconds['rli_merge']:.2f} "
              f"upsert_rli={seconds['rli_upsert']:.2f} "
              f"upsert_bucket={seconds['bucket_upsert']:.2f} "
              f"merge_bucket={seconds['bucket_merge']:.2f} "
              f"merge_bucket_rows_ok={str(counts['bucket_merge'] == expected).lower()}")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def fill(spark: Any, work: Path, name: str, props: dict[str, str], rows: int) -> None:
    listed = ", ".join(f"'{k}'='{v}'" for k, v in props.items())
    spark.sql(f"create table lake.{name} (_row_key string, _ref_key bigint, v string, "
              f"_is_deleted boolean) using hudi location '{work}/wh/lake/{name}' "
              f"tblproperties ({listed})")
    # a bucket table must be filled bucket by bucket (a plain bulk insert writes files that
    # share a bucket id: "Find multiple files ... that belong to the same bucket id")
    spark.conf.set("hoodie.spark.sql.insert.into.operation",
                   "insert" if "BUCKET" in props.values() else "bulk_insert")
    start = time.perf_counter()
    for low in range(0, rows, 500_000):
        spark.sql(f"insert into lake.{name} select cast(id as string), 1, concat('v', id), "
                  f"false from range({low}, {min(rows, low + 500_000)})")
    spark.conf.set("hoodie.spark.sql.insert.into.operation", "bulk_insert")
    print(f"  filled lake.{name} ({rows} rows) in {time.perf_counter() - start:.1f} s",
          flush=True)


def apply(spark: Any, work: Path, name: str) -> None:
    if name.endswith("_merge"):
        spark.sql(MERGE.format(table=f"lake.{name}"))
        return
    props = TABLES[name]
    options = {k: v for k, v in props.items() if k.startswith("hoodie.")}
    options.update({"hoodie.table.name": name, "hoodie.datasource.write.operation": "upsert",
                    "hoodie.datasource.write.recordkey.field": "_row_key",
                    "hoodie.datasource.write.precombine.field": "_ref_key",
                    "hoodie.datasource.write.table.type": "MERGE_ON_READ"})
    spark.table("meta.changes").drop("_merge_action") \
        .selectExpr("*", "_is_deleted as _hoodie_is_deleted") \
        .write.format("hudi").options(**options).mode("append").save(f"{work}/wh/lake/{name}")


if __name__ == "__main__":
    main()
