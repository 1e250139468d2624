"""Shared by the benchmarks that need a big lake table fast: fill it with Spark's range
(copies of one merged row, new keys), and time the pipeline's merge step."""

from __future__ import annotations

import time
from typing import Any

CHUNK = 2_000_000  # rows per insert: Hudi collects each written row's location for the
# record-level index on the driver (10M rows in one insert exhaust a 3 GiB driver)


def fill_lake(spark: Any, lake: str, first_id: int, count: int) -> float:
    """Append ``count`` rows with trip ids from ``first_id`` to the lake table ``lake`` (bulk
    inserts on Hudi, of CHUNK rows each), each a copy of one of its rows with a new key;
    seconds taken."""
    sample = spark.table(lake).where("_row_key is not null").limit(1).collect()[0]
    columns = [f.name for f in spark.table(lake).schema.fields
               if not f.name.startswith("_hoodie_")]
    values = []
    for name in columns:
        if name == "trip_id":
            values.append("id as trip_id")
        elif name == "_row_key":
            values.append(f"replace('{sample['_row_key']}', '{sample['trip_id']}', "
                          "cast(id as string)) as _row_key")
        else:
            values.append(f"s.`{name}`")
    spark.createDataFrame([sample.asDict()]).select(*columns).createOrReplaceTempView("sample")
    hudi = spark.conf.get("spark.sluice.table_format", "hudi") == "hudi"
    if hudi:
        spark.conf.set("hoodie.spark.sql.insert.into.operation", "bulk_insert")
    start = time.perf_counter()
    for low in range(first_id, first_id + count, CHUNK):
        high = min(low + CHUNK, first_id + count)
        spark.sql(f"insert into {lake} ({', '.join(f'`{c}`' for c in columns)}) "
                  f"select {', '.join(values)} from range({low}, {high}) cross join sample s")
    if hudi:
        spark.conf.unset("hoodie.spark.sql.insert.into.operation")
    return time.perf_counter() - start


def time_merges(pipeline: Any) -> list[float]:
    """Make ``pipeline._merge`` record how long each call takes; the list it appends to."""
    seconds: list[float] = []
    merge = pipeline._merge

    def timed_merge(*args: Any) -> None:
        start = time.perf_counter()
        merge(*args)
        seconds.append(time.perf_counter() - start)

    pipeline._merge = timed_merge
    return seconds
