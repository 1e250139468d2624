"""Issue #49.3: does converting and judging several jobs' small batches in one Spark pass cut
the per-table cost of a batch?

K jobs of one source (the fleet's trips tables: one converter shape), warmed through the
runner; then each gets one new raw batch of ``--events`` events (landed, not yet merged), and
``--rounds`` rounds time, alternately, the two ways of the batch path's work before the merge
(steps/batch.py ``run_batches``: the converter over the new raw rows, the suite's one
aggregate, the valid rows to the driver):

* apart: per job, as the runner does it today: ``--slots`` jobs at once (the runner's
  ``max_parallel_jobs``, by default the driver's cores), each on its own thread;
* together: the K converters' rows in one ``union all`` (a job column added), one aggregate of
  the suite and one collect, the valid rows then grouped per job on the driver.

The lake's and the raw table's commits are not shared by either (each table keeps its own raw,
error and lake tables), so they are left out; the line gives what one pass saves per table
and the ratio of the two (measured in the same run, so a busy machine slows both alike):

    multi-pass: jobs=K slots=S events=N apart_s=<s per table> together_s=<s per table>
                saving_s=<s per table> ratio=<together / apart>

    .venv/bin/python bench/multi_pass.py [--jobs 8 --slots 2 --events 100 --rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from runner_bench import Bench, run_for  # noqa: E402

from python_ingest.demo import trips as demo  # noqa: E402
from python_ingest.demo.fleet import topic_of  # noqa: E402


def prepared(bench: Bench, names: list[str], events: int) -> list[tuple[str, str, Path]]:
    """Per job: the converter's SQL over its newest raw batch, and its suite."""
    from python_ingest.steps.compiled import BATCH_FROM, BATCH_TO, compile_job
    from python_ingest.steps.dbt import Dbt
    from python_ingest.steps.fork.split import suite_path
    from python_ingest.steps.jobs import run_ingest
    from python_ingest.tables.checkpoints import read_checkpoint
    from python_ingest.tables.names import JobTables

    spark, settings = bench.spark, bench.settings
    dbt = Dbt(settings)
    cache: dict[str, Any] = {}
    out = []
    for name in names:
        demo.produce(bench.bootstrap, topic_of(name), bench.generators[name].events(events))
        job = settings.job(name)
        assert run_ingest(spark, settings, job).landed > 0
        tables = JobTables(name, dbt.job_models(name))
        newest = read_checkpoint(spark, tables.raw).batch_id  # type: ignore[union-attr]
        compiled = compile_job(spark, dbt, tables, cache)
        sql = compiled.converter.replace(BATCH_FROM, str(newest)).replace(BATCH_TO, str(newest))
        out.append((name, sql, suite_path(dbt.project, tables.staging_model)))
    return out


def apart(spark: Any, jobs: list[tuple[str, str, Path]], report: Path, slots: int) -> int:
    from concurrent.futures import ThreadPoolExecutor

    from python_ingest.steps.fork.split import split
    from python_ingest.steps.merge.driver import driver_rows

    def one(job: tuple[str, str, Path]) -> int:
        name, sql, suite = job
        parts = split(spark, spark.sql(sql), suite, report, f"apart-{name}", f"staging.{name}",
                      f"staging.{name}__valid", f"errors.{name}", per_batch=True)
        held = driver_rows(parts.valid)
        assert held is not None
        parts.release()
        return sum(len(v) for v in held.values())

    with ThreadPoolExecutor(slots) as pool:
        return sum(pool.map(one, jobs))


def together(spark: Any, jobs: list[tuple[str, str, Path]], report: Path, slots: int) -> int:
    from python_ingest.steps.fork.split import split
    from python_ingest.steps.merge.driver import driver_rows

    union = " union all ".join(f"select '{name}' as __sluice_job, * from ({sql})"
                               for name, sql, _ in jobs)
    parts = split(spark, spark.sql(union), jobs[0][2], report, "together", "staging.all",
                  "staging.all__valid", "errors.all", per_batch=True)
    held = driver_rows(parts.valid)
    assert held is not None
    by_job: dict[str, int] = {}
    for batch in held.values():
        for row in batch:
            by_job[row["__sluice_job"]] = by_job.get(row["__sluice_job"], 0) + 1
    parts.release()
    return sum(by_job.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--slots", type=int, default=2, help="jobs at once when apart")
    args = parser.parse_args()
    names = [f"mp{i:02d}" for i in range(args.jobs)]
    bench = Bench(names)
    try:
        spark = bench.session(names)
        for name in names:
            demo.produce(bench.bootstrap, topic_of(name), bench.generators[name].events(300))
        print(f"warm-up: {args.jobs} jobs through the runner", flush=True)
        run_for(bench, names, until_idle=True)
        jobs = prepared(bench, names, args.events)
        report = Path(tempfile.mkdtemp(prefix="sluice-multi-pass-"))
        # the same rows either way (and both warm)
        assert apart(spark, jobs, report, args.slots) == together(spark, jobs, report, 1)
        times: dict[str, list[float]] = {"apart": [], "together": []}
        for round_ in range(args.rounds):
            for way, fn in (("apart", apart), ("together", together))[::1 - 2 * (round_ % 2)]:
                started = time.perf_counter()
                fn(spark, jobs, report, args.slots)
                times[way].append((time.perf_counter() - started) / args.jobs)
            print(f"  round {round_ + 1}: apart {times['apart'][-1]:.3f}s, together "
                  f"{times['together'][-1]:.3f}s per table", flush=True)
        a, t = statistics.median(times["apart"]), statistics.median(times["together"])
        print(f"multi-pass: jobs={args.jobs} slots={args.slots} events={args.events} "
              f"apart_s={a:.3f} together_s={t:.3f} saving_s={a - t:.3f} ratio={t / a:.2f}")
    finally:
        bench.close()


if __name__ == "__main__":
    main()
