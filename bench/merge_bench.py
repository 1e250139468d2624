"""Merge benchmark: does a batch cost what its changes cost, or what the table holds?

Per lake size (default 1M and 10M rows), in its own process (own JVM, own warehouse; one
broker for all):
  1. a first 100-event batch through the whole pipeline creates every table of the demo job;
  2. the lake table is filled to the size with Spark's range (Hudi bulk inserts), compacted
     (so that the measured merge is never the delta commit that compacts inline; its cost is
     printed apart), and its global index built in bulk
     (steps/merge/index.py build_index, as after a bootstrap);
  3. 10k changes (50% full-row updates of random existing keys, 40% inserts, 10% deletes of
     random existing keys; shuffled, one partition order) go through ingest, staging and the
     fork; the merge step (`steps.pipeline._merge`: change set + MERGE, as `sluice run` does)
     is timed alone.
On the largest size, the same changes are then merged the naive way into a copy of the table
taken before step 3: one `MERGE INTO ... ON lake._row_key = batch._row_key` whose join reads
the whole table (Hudi's GLOBAL_SIMPLE index, the whole-table key join Hudi's record-level
index is measured against), what a dbt incremental model with a unique key does.
Ends with the line (one line; wrapped here)
  merge: changes=10000 t1M=<s> t10M=<s> scale=<t10M/t1M> naive10M=<s>
         vs_naive=<t10M/naive10M>

    .venv/bin/python bench/merge_bench.py [--sizes 1000000,10000000]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from lakefill import (  # noqa: E402  (bench/, beside this file)
    add_child_arguments,
    copy_lake,
    fill_lake,
    report,
    run_children,
    time_merges,
    trips_job,
)

CHANGES = 10_000
FIRST_ID = 10_000_000  # filled keys start here, after the first batch's trips
EVENTS = "SLUICE_BENCH_EVENT_LOG"  # a folder: Spark event logs of the runs, for a profile


def label(size: int) -> str:
    return f"{size // 1_000_000}M" if size % 1_000_000 == 0 else f"{size // 1000}k"


def one_size(size: int, bootstrap: str, workdir: Path, naive: bool) -> dict[str, float]:
    """Fill a lake of ``size`` rows, merge the changes; the merge's seconds (and the naive
    MERGE's with ``naive``)."""
    from python_ingest.demo.trips import Event, produce
    from python_ingest.steps import pipeline
    from python_ingest.steps.merge.index import build_index
    from python_ingest.tables.formats import maintain
    from python_ingest.tables.names import JobTables

    topic = f"bench.merge.{size}"
    settings, spark, job, dbt, generator = trips_job(
        workdir, str(size), bootstrap, topic, spark_conf={
            "spark.driver.memory": "3g",
            **({"spark.eventLog.enabled": "true", "spark.eventLog.dir": os.environ[EVENTS]}
               if os.environ.get(EVENTS) else {})})
    merge_seconds = time_merges(pipeline)

    def run(what: str) -> None:
        start = time.perf_counter()
        result = pipeline.run_job(spark, settings, job, dbt=dbt)
        print(f"  {label(size)} {what}: {time.perf_counter() - start:.1f} s, merge "
              f"{merge_seconds[-1]:.1f} s {result.counts}", flush=True)

    produce(bootstrap, topic, generator.events(100))
    run("first batch (creates the tables)")

    lake = "lake.trips"
    seconds = fill_lake(spark, lake, FIRST_ID, size)
    print(f"  {label(size)} filled {lake} in {seconds:.1f} s", flush=True)
    # the fill's delta commits could make the measured merge the one that compacts the lake
    # inline (every 5); compact it now, as a bootstrap's services would, and say what it costs
    start = time.perf_counter()
    maintain(spark, lake, merged=True)
    # counted once compacted: a bucket lake's fill is all in log files, which a read merges in
    # memory (10M rows ran a 3 GiB driver out of heap)
    print(f"  {label(size)} compacted, cleaned, archived the lake in "
          f"{time.perf_counter() - start:.1f} s ({spark.table(lake).count()} rows)", flush=True)
    start = time.perf_counter()  # what `sluice bootstrap` does after loading a table
    entries = build_index(spark, JobTables("trips", dbt.job_models("trips")))
    print(f"  {label(size)} built the index ({entries} entries) in "
          f"{time.perf_counter() - start:.1f} s", flush=True)
    if naive:
        _copy_for_naive(spark, lake)

    rng = random.Random(11)
    keys = rng.sample(range(FIRST_ID, FIRST_ID + size), CHANGES * 6 // 10)
    changes: list[Event] = []
    for trip_id in keys[:CHANGES // 2]:  # full-row updates of random existing keys
        changes.append(generator._event("update", {**generator._new_row(trip_id),
                                                   **generator._envelope()}))
    for i in range(CHANGES * 4 // 10):  # inserts
        trip_id = FIRST_ID + size + i
        changes.append(generator._event("create", {**generator._new_row(trip_id),
                                                   **generator._envelope()}))
    for trip_id in keys[CHANGES // 2:]:  # deletes of random existing keys
        changes.append(generator._event("delete", {**generator._new_row(trip_id),
                                                   **generator._envelope(_is_deleted=True)}))
    rng.shuffle(changes)
    produce(bootstrap, topic, iter(changes))
    merge_seconds.clear()
    run(f"{CHANGES} changes into {size} rows")
    figures = {"merge": merge_seconds[-1]}
    if naive:
        figures["naive"] = _naive_merge(spark)
        print(f"  {label(size)} naive MERGE: {figures['naive']:.1f} s", flush=True)
    spark.stop()
    return figures


NAIVE = "meta.bench_naive_lake"


def _copy_for_naive(spark: Any, lake: str) -> None:
    """A copy of the filled lake table, keyed the same way, whose writer finds keys by
    joining the whole table (GLOBAL_SIMPLE)."""
    seconds = copy_lake(spark, lake, NAIVE, {"hoodie.index.type": "GLOBAL_SIMPLE",
                                             "hoodie.metadata.record.index.enable": "false"})
    print(f"  copied {lake} for the naive MERGE in {seconds:.1f} s", flush=True)


def _naive_merge(spark: Any) -> float:
    """The batch's valid rows, newest change per key, merged by a whole-table key join."""
    batch = spark.sql("select max(_batch_id) from staging.stg_demo__trips__valid").collect()[0][0]
    columns = [f.name for f in spark.table(NAIVE).schema.fields
               if not f.name.startswith("_hoodie_")]
    valid = set(spark.table("staging.stg_demo__trips__valid").columns)
    select = ", ".join(f"`{c}`" if c in valid else f"cast(null as timestamp) as `{c}`"
                       for c in columns)
    start = time.perf_counter()
    spark.sql(f"""
        merge into {NAIVE} as lake
        using (
            select {select} from (
                select *, row_number() over (partition by _row_key order by _ref_key desc) as n
                from staging.stg_demo__trips__valid where _batch_id = {batch}
            ) where n = 1
        ) as batch
        on lake._row_key = batch._row_key
        when matched and batch._is_deleted then delete
        when matched and not batch._is_deleted then update set *
        when not matched and not batch._is_deleted then insert *""")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000000,10000000",
                        help="lake sizes, comma-separated (the naive MERGE runs on the last)")
    parser.add_argument("--naive", action="store_true", help=argparse.SUPPRESS)
    add_child_arguments(parser, type=int)
    args = parser.parse_args()
    if args.one:
        report(one_size(args.one, args.bootstrap, Path(args.workdir), args.naive))
        return

    sizes = [int(s) for s in args.sizes.split(",")]
    results = run_children(__file__, "sluice-merge-bench-", [
        (str(size), f"{label(size)} rows", ["--naive"] if size == sizes[-1] else [])
        for size in sizes])
    small, large = results[str(sizes[0])], results[str(sizes[-1])]
    names = [label(s) for s in (sizes[0], sizes[-1])]
    print(f"merge: changes={CHANGES} t{names[0]}={small['merge']:.1f} "
          f"t{names[1]}={large['merge']:.1f} scale={large['merge'] / small['merge']:.2f} "
          f"naive{names[1]}={large['naive']:.1f} "
          f"vs_naive={large['merge'] / large['naive']:.2f}")


if __name__ == "__main__":
    main()
