"""Table services benchmark: do many small merges leave a table that reads like a compacted one?

Two runs, each in its own process (own JVM, own warehouse; one broker for both): services on
(the job's defaults: after every 5th merged batch the lake is compacted and cleaned down to 10
commits, after every 20th the index is compacted) and off (``services: {compact_every: 0,
index_compact_every: 0}``). Each:
  1. a first 100-event batch through the whole pipeline creates every table of the demo job;
  2. the lake is filled to 1M rows with Spark's range, compacted, and its index built
     (bench/lakefill.py, as bench/merge_bench.py does);
  3. 200 small batches (default 100 changes each: 50 updates of random existing keys, 40
     inserts, 10 deletes) are merged one by one through the pipeline's merge step and the
     services due after it (``steps.pipeline._merge`` and ``_services``, what `sluice run`
     does after the fork). The batches are written straight into the job's valid table: the
     ingest, staging and fork of a batch cost the same with services on or off;
  4. the data files of the lake's folder are counted (Hudi: base and log files, every file
     slice cleaning left), and a full scan of the lake is timed (best of 3).
The services-on run then copies its lake into a fresh table (one bulk insert: base files
only, the layout compaction aims at) and times the same scan on it.
Ends with the line (one line; wrapped here)
  services: batches=200 files_on=<n> files_off=<n> scan_on=<s> scan_off=<s>
            scan_compacted=<s> ratio=<scan_on/scan_compacted>

    .venv/bin/python bench/services_bench.py [--batches 200] [--changes 100] [--rows 1000000]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from lakefill import (  # noqa: E402  (bench/, beside this file)
    add_child_arguments,
    copy_lake,
    copy_select,
    fill_lake,
    full_scan,
    report,
    run_children,
    trips_job,
)

FIRST_ID = 10_000_000  # filled keys start here, after the first batch's trips
VARIANTS = {"on": {}, "off": {"compact_every": 0, "index_compact_every": 0}}
COMPACTED = "meta.bench_compacted_lake"


def one_variant(variant: str, bootstrap: str, workdir: Path, rows: int, batches: int,
                changes: int) -> dict[str, float]:
    """Fill, merge ``batches`` small batches, count files, time scans."""
    from python_ingest.demo.trips import produce
    from python_ingest.steps import pipeline
    from python_ingest.steps.merge.index import build_index
    from python_ingest.tables.formats import append, maintain
    from python_ingest.tables.lease import job_lease
    from python_ingest.tables.names import JobTables
    from python_ingest.tables.runs import Run

    topic = f"bench.services.{variant}"
    services = VARIANTS[variant]
    settings, spark, job, dbt, generator = trips_job(
        workdir, variant, bootstrap, topic, spark_conf={"spark.driver.memory": "3g"},
        job={"services": services} if services else None)
    produce(bootstrap, topic, generator.events(100))
    pipeline.run_job(spark, settings, job, dbt=dbt)
    tables = JobTables("trips", dbt.job_models("trips"))
    lake = tables.lake
    assert lake is not None
    seconds = fill_lake(spark, lake, FIRST_ID, rows)
    maintain(spark, lake, merged=True)
    build_index(spark, tables)
    print(f"  {variant}: filled {lake} with {rows} rows in {seconds:.1f} s, compacted, "
          "indexed", flush=True)

    valid = tables.valid
    columns = [f.name for f in spark.table(valid).schema.fields
               if not f.name.startswith("_hoodie_")]
    firsts = spark.table(valid).where("not _is_deleted").select(*columns)
    sample = firsts.limit(1).collect()[0]  # a first-batch row
    spark.createDataFrame([sample], firsts.schema).createOrReplaceTempView("sample")
    # every change newer than any row the lake holds (else the out-of-order guard drops it)
    newest_ref = int(spark.sql(f"select max(_ref_key) from {lake}").collect()[0][0])
    first_live = spark.table(lake).count() - rows  # the first batch's rows
    live = set(range(FIRST_ID, FIRST_ID + rows))  # the oracle: keys the lake must hold
    rng = random.Random(7)
    next_id = FIRST_ID + rows
    start = time.perf_counter()
    merge_seconds = []
    for number in range(batches):
        batch_id = 2 + number
        picked = rng.sample(range(FIRST_ID, next_id), changes * 6 // 10)
        updates, deletes = picked[:changes // 2], picked[changes // 2:]
        inserts = list(range(next_id, next_id + changes - len(picked)))
        next_id += len(inserts)
        live |= set(updates) | set(inserts)  # an update of a deleted key brings it back
        live -= set(deletes)
        kinds = ([(k, False) for k in updates + inserts] + [(k, True) for k in deletes])
        rng.shuffle(kinds)
        append(_batch_rows(spark, columns, sample, kinds, batch_id, newest_ref + batch_id),
               valid)
        run = Run(job=job.name)
        merge_start = time.perf_counter()
        with job_lease(spark, job.name):
            pipeline._merge(spark, dbt, tables, run)
            pipeline._services(spark, job, tables, run)
        merge_seconds.append(time.perf_counter() - merge_start)
        if (number + 1) % 20 == 0:
            print(f"  {variant}: {number + 1} batches merged, {_data_files(spark, lake)} data "
                  f"files, last 20 merges {sum(merge_seconds[-20:]) / 20:.1f} s each "
                  f"({time.perf_counter() - start:.0f} s in all)", flush=True)
    found = spark.table(lake).count()
    if found != first_live + len(live):  # a bench that measured no-op merges would lie
        sys.exit(f"{variant}: the lake holds {found} rows, the changes leave "
                 f"{first_live + len(live)}")
    figures = {"files": _data_files(spark, lake), "scan": full_scan(spark, lake),
               "merge_mean": sum(merge_seconds) / len(merge_seconds)}
    if variant == "on":
        copy_lake(spark, lake, COMPACTED)
        figures["scan_compacted"] = full_scan(spark, COMPACTED)
    print(f"  {variant}: {found} lake rows (as the changes leave it), {figures}", flush=True)
    spark.stop()
    return figures


def _batch_rows(spark: Any, columns: list[str], sample: Any, kinds: list[tuple[int, bool]],
                batch_id: int, ref: int) -> Any:
    """One batch's valid rows: copies of ``sample`` with the given keys and ref key ``ref``,
    deleted or not."""
    values = ", ".join(f"({key}, {str(deleted).lower()}, {offset})"
                       for offset, (key, deleted) in enumerate(kinds))
    select = copy_select(columns, sample, "c.id", {
        "_ref_key": f"cast({ref} as bigint)",
        "_is_deleted": "c.deleted",
        "_batch_id": f"cast({batch_id} as bigint)",
        "_kafka_offset": "cast(c.n as bigint)",
        "fare_amount": f"cast(s.fare_amount + {batch_id % 50} as decimal(10, 2))"})
    return spark.sql(f"select {', '.join(select)} from (values {values}) as c(id, deleted, n) "
                     "cross join sample s")


def _data_files(spark: Any, table: str) -> int:
    """Data files in the table's folder (Hudi: base files and log files; Iceberg: data and
    delete files), metadata excluded."""
    from python_ingest.runtime.catalog import location

    root = Path(location(spark, table).removeprefix("file:"))
    return sum(1 for path in root.rglob("*") if path.is_file()
               and ".hoodie" not in path.parts and "metadata" not in path.parts
               and not path.name.startswith(".hoodie_partition")
               and not path.name.endswith(".crc"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=200, help="merged batches (200)")
    parser.add_argument("--changes", type=int, default=100, help="changes per batch (100)")
    parser.add_argument("--rows", type=int, default=1_000_000, help="lake rows (1M)")
    add_child_arguments(parser, choices=VARIANTS)
    args = parser.parse_args()
    if args.one:
        report(one_variant(args.one, args.bootstrap, Path(args.workdir), args.rows,
                           args.batches, args.changes))
        return

    results = run_children(__file__, "sluice-services-bench-", [
        (variant, f"services {variant}", ["--rows", str(args.rows), "--batches",
                                          str(args.batches), "--changes", str(args.changes)])
        for variant in VARIANTS])
    on, off = results["on"], results["off"]
    print(f"merge per batch: on {on['merge_mean']:.1f} s, off {off['merge_mean']:.1f} s")
    print(f"services: batches={args.batches} files_on={on['files']} files_off={off['files']} "
          f"scan_on={on['scan']:.2f} scan_off={off['scan']:.2f} "
          f"scan_compacted={on['scan_compacted']:.2f} "
          f"ratio={on['scan'] / on['scan_compacted']:.2f}")


if __name__ == "__main__":
    main()
