"""Table-format benchmark: the same work on Hudi and on Iceberg, in one run.

Per format, in its own process (own JVM, own warehouse; the same broker and the same events):
  batch100  a 100-event batch through the whole pipeline (ingest, staging, fork, merge, run
            record) on a warm session, after a first batch created every table;
  e2e       N changelog events (default 500k, the demo's mix) through the whole pipeline in one
            run: events/s;
  merge     the lake table filled to 1M rows, then a batch of 10k changes (50% updates of random
            existing keys, 40% inserts, 10% deletes): seconds of the merge step alone.
Ends with the line (one line; wrapped here)
  formats: hudi_e2e=<ev/s> iceberg_e2e=<ev/s> hudi_merge=<s> iceberg_merge=<s>
           hudi_batch100=<s> iceberg_batch100=<s>

    .venv/bin/python bench/formats_bench.py [--events 500000] [--lake-rows 1000000]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from lakefill import (  # noqa: E402  (bench/, beside this file)
    add_child_arguments,
    fill_lake,
    report,
    run_children,
    time_merges,
    time_steps,
    trips_job,
)

FORMATS = ("hudi", "iceberg")


def one_format(fmt: str, bootstrap: str, workdir: Path, events: int, lake_rows: int) -> dict:
    """Run the three measurements for ``fmt``; returns the figures."""
    from python_ingest.demo.trips import Event, produce
    from python_ingest.steps import pipeline
    from python_ingest.steps.merge.index import build_index
    from python_ingest.tables.names import JobTables

    topic = f"bench.formats.{fmt}"
    settings, spark, job, dbt, generator = trips_job(workdir, fmt, bootstrap, topic,
                                                     table_format=fmt)
    merge_seconds = time_merges(pipeline)
    steps = time_steps(pipeline)

    def run(label: str) -> float:
        steps.clear()
        start = time.perf_counter()
        result = pipeline.run_job(spark, settings, job, dbt=dbt)
        seconds = time.perf_counter() - start
        print(f"  {fmt} {label}: {seconds:.1f} s {result.counts}", flush=True)
        print("    steps: " + ", ".join(f"{k} {v:.2f}" for k, v in steps.items()), flush=True)
        return seconds

    produce(bootstrap, topic, generator.events(100))
    run("first batch (creates the tables)")
    produce(bootstrap, topic, generator.events(100))
    batch100 = run("batch100")
    produce(bootstrap, topic, generator.events(events))
    e2e = events / run(f"e2e {events} events")

    lake = "lake.trips"
    present = spark.table(lake).count()
    first_id = generator.next_trip_id + 1_000_000
    fill = max(0, lake_rows - present)
    seconds = fill_lake(spark, lake, first_id, fill)
    print(f"  {fmt} filled {lake} with {fill} rows in {seconds:.1f} s "
          f"({spark.table(lake).count()} rows)", flush=True)
    build_index(spark, JobTables("trips", dbt.job_models("trips")))  # the fill bypassed it

    rng = random.Random(11)
    keys = rng.sample(range(first_id, first_id + fill), 6_000)
    changes: list[Event] = []
    for trip_id in keys[:5_000]:  # updates of random existing keys (full rows)
        changes.append(generator._event("update", {**generator._new_row(trip_id),
                                                   **generator._envelope()}))
    for _ in range(4_000):  # inserts
        trip_id = generator.next_trip_id
        generator.next_trip_id += 1
        changes.append(generator._event("create", {**generator._new_row(trip_id),
                                                   **generator._envelope()}))
    for trip_id in keys[5_000:]:  # deletes
        changes.append(generator._event("delete", {**generator._new_row(trip_id),
                                                   **generator._envelope(_is_deleted=True)}))
    rng.shuffle(changes)
    produce(bootstrap, topic, iter(changes))
    merge_seconds.clear()
    run("10k changes into the filled lake table")
    figures = {"e2e": e2e, "merge": merge_seconds[-1], "batch100": batch100}
    spark.stop()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=500_000)
    parser.add_argument("--lake-rows", type=int, default=1_000_000)
    add_child_arguments(parser, choices=FORMATS)
    args = parser.parse_args()
    if args.one:
        report(one_format(args.one, args.bootstrap, Path(args.workdir), args.events,
                          args.lake_rows))
        return

    results = run_children(__file__, "sluice-formats-bench-", [
        (fmt, fmt, ["--events", str(args.events), "--lake-rows", str(args.lake_rows)])
        for fmt in FORMATS])
    h, i = results["hudi"], results["iceberg"]
    print(f"ratios hudi/iceberg: e2e {h['e2e'] / i['e2e']:.2f} (higher is better), "
          f"merge {h['merge'] / i['merge']:.2f}, batch100 {h['batch100'] / i['batch100']:.2f} "
          "(lower is better)")
    print(f"formats: hudi_e2e={h['e2e']:.0f} iceberg_e2e={i['e2e']:.0f} "
          f"hudi_merge={h['merge']:.1f} iceberg_merge={i['merge']:.1f} "
          f"hudi_batch100={h['batch100']:.1f} iceberg_batch100={i['batch100']:.1f}")


if __name__ == "__main__":
    main()
