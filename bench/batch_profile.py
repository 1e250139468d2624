"""Where a warm small batch's time goes: one job on a private broker and warehouse, warmed up,
then ``--batches`` batches of ``--events`` events each run through ``run_job`` as the runner
runs them (the fork's Data Docs page deferred, run records written together afterwards: both
timed apart, off the batch), with every step and every Spark SQL statement timed (dbt's
statements included: dbt-spark runs them through the same session). Prints a table per step
and the slowest statements, then one line (``cpu_s``: the median batch's CPU seconds, of this
process and of its Spark JVM with the Python workers it forked: driver and executors, as
local mode runs them):

    profile: events=100 batches=5 median=<s> cpu_s=<s> ingest=<s> staging=<s> fork=<s> ...

    .venv/bin/python bench/batch_profile.py [--events 100 --batches 5 --format hudi]
                                            [--cprofile out.prof] [--history]

``--history``: the lake model keeps a history table; the line says ``history=1`` and the
history's commit per batch (``history=<s>``).
"""

from __future__ import annotations

import argparse
import collections
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from runner_bench import Bench, run_for  # noqa: E402

from python_ingest.demo import trips as demo  # noqa: E402
from python_ingest.demo.fleet import topic_of  # noqa: E402

STEPS = {"ingest": ("python_ingest.steps.pipeline", "ingest"),
         # the step tables' path (a job's first batch, keep_step_tables, Iceberg)
         "staging": ("python_ingest.steps.pipeline", "_staging"),
         "fork": ("python_ingest.steps.pipeline", "fork_staged"),
         "merge": ("python_ingest.steps.pipeline", "_merge"),
         # the batch path (steps/batch.py): converter + fork in one pass, then the merge
         "convert_fork": ("python_ingest.steps.batch", "split"),
         "apply": ("python_ingest.steps.batch", "_merge"),
         "compile": ("python_ingest.steps.batch", "compile_job"),
         "status": ("python_ingest.steps.pipeline", "record_status"),
         "record": ("python_ingest.tables.runs.Run", "finish"),
         "dbt": ("python_ingest.steps.dbt.Dbt", "run"),
         "validate": ("python_ingest.steps.fork.split", "_validate_fallback"),
         # --history: the history table's commit per batch (steps/history/writer.py)
         "history": ("python_ingest.steps.history.writer", "write_batch")}


def tree_cpu_s(root: int) -> float:
    """CPU seconds (user + system) of process ``root`` and every process below it, from
    /proc: the driver JVM with its executor threads, and the Python workers it forked."""
    import os

    from bench.common import processes

    table = processes()
    tick = os.sysconf("SC_CLK_TCK")
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += table[pid][1] / tick if pid in table else 0.0
        todo.extend(child for child, (parent, _, _) in table.items() if parent == pid)
    return total


def batch_cpu_s(spark: Any) -> float:
    """This process's CPU and its Spark JVM's (with the JVM's children), in seconds."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    gateway = spark.sparkContext._gateway
    jvm = gateway.proc.pid if gateway is not None and gateway.proc is not None else None
    return own.ru_utime + own.ru_stime + (tree_cpu_s(jvm) if jvm else 0.0)


class Timer:
    def __init__(self) -> None:
        self.steps: dict[str, float] = collections.defaultdict(float)
        self.sql: list[tuple[float, str, str]] = []  # seconds, step, statement
        self.full: dict[str, str] = {}  # the last full text of each statement's start
        self.current = "-"

    def wrap(self, owner: Any, attr: str, label: str) -> None:
        original = getattr(owner, attr)
        timer = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            outer, t0 = timer.current, time.perf_counter()
            if label in ("ingest", "staging", "fork", "merge", "status", "record",
                         "convert_fork", "apply", "history"):
                timer.current = label
            try:
                return original(*args, **kwargs)
            finally:
                timer.steps[label] += time.perf_counter() - t0
                timer.current = outer

        setattr(owner, attr, timed)


def instrument(timer: Timer) -> None:
    import importlib

    from pyspark.sql import SparkSession

    for label, (module, attr) in STEPS.items():
        parts = module.split(".")
        try:
            owner: Any = importlib.import_module(module)
        except ModuleNotFoundError:
            owner = getattr(importlib.import_module(".".join(parts[:-1])), parts[-1])
        timer.wrap(owner, attr, label)
    original = SparkSession.sql

    def sql(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return original(self, query, *args, **kwargs)
        finally:
            text = re.sub(r"\s+", " ", re.sub(r"^\s*/\*.*?\*/", "", query, flags=re.S)).strip()
            timer.sql.append((time.perf_counter() - t0, timer.current, text[:110]))
            timer.full[text[:40]] = query

    SparkSession.sql = sql  # type: ignore[method-assign,assignment]


def phases(spark: Any, timer: Timer) -> None:
    """Analysis, planning and execution of the merge's change-set query, timed apart."""
    for start, query in timer.full.items():
        if not start.startswith("create table meta.sluice_merge"):
            continue
        found = re.search(r"using parquet\s+as", query)
        if found is None:
            continue
        select = query[found.end():]
        for _ in range(3):
            t0 = time.perf_counter()
            df = spark.sql(select)
            t1 = time.perf_counter()
            df._jdf.queryExecution().executedPlan()
            t2 = time.perf_counter()
            df.collect()
            t3 = time.perf_counter()
            df2 = spark.sql(select)
            df2.collect()
            t4 = time.perf_counter()
            print(f"change set: analysis {t1 - t0:.2f}s planning {t2 - t1:.2f}s execution "
                  f"{t3 - t2:.2f}s; all at once {t4 - t3:.2f}s")


def keep_history(work: Path, name: str) -> None:
    """The job's lake model with ``history=true`` (python_ingest/steps/history/rules.py)."""
    [model] = [p for p in (work / "models").rglob(f"{name}.sql") if "lake" in p.parts]
    text = model.read_text()
    if "config(" in text:
        text = text.replace("config(", "config(history=true, ", 1)
    else:
        text = "{{ config(history=true) }}\n" + text
    model.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--format", choices=("hudi", "iceberg"), default="hudi")
    parser.add_argument("--cprofile", help="write a cProfile of the timed batches here")
    parser.add_argument("--phases", action="store_true",
                        help="then time the change set's analysis, planning and execution")
    parser.add_argument("--history", action="store_true",
                        help="the lake model keeps a history table (history=true): its cost")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for the session (to try one), repeatable")
    args = parser.parse_args()
    name = "prof"
    bench = Bench([name], extra_jobs=None)
    try:
        if args.format != "hudi":
            import dataclasses
            bench.settings = dataclasses.replace(bench.settings, table_format=args.format)
        if args.conf:
            import dataclasses
            extra = dict(c.split("=", 1) for c in args.conf)
            bench.settings = dataclasses.replace(bench.settings, spark=dataclasses.replace(
                bench.settings.spark, conf={**bench.settings.spark.conf, **extra}))
        if args.history:
            keep_history(bench.work, name)
        spark = bench.session([name])
        gen = bench.generators[name]
        demo.produce(bench.bootstrap, topic_of(name), gen.events(1000))
        run_for(bench, [name], until_idle=True)
        from python_ingest.steps.dbt import Dbt
        from python_ingest.steps.pipeline import run_job

        dbt = Dbt(bench.settings)
        job = bench.settings.job(name)
        demo.produce(bench.bootstrap, topic_of(name), gen.events(args.events))
        run_job(spark, bench.settings, job, dbt=dbt, inline_services=False)  # warm the path
        timer = Timer()
        instrument(timer)
        import logging  # the batch path's own line per merge: where its seconds went

        for logger in ("python_ingest.steps.batch", "python_ingest.steps.history.writer"):
            merges = logging.getLogger(logger)  # the history's line: its seconds per part
            merges.setLevel(logging.INFO)
            merges.addHandler(logging.StreamHandler(sys.stdout))
        profiler = None
        if args.cprofile:
            import cProfile
            profiler = cProfile.Profile()
        totals, cpus = [], []
        docs: list[Any] = []
        from python_ingest.tables.runs import records_deferred

        deferred = records_deferred(spark, every_s=3600.0)  # as the runner: together, later
        deferred.__enter__()
        for n in range(args.batches):
            assert demo.produce(bench.bootstrap, topic_of(name), gen.events(args.events))
            before = dict(timer.steps)
            t0, c0 = time.perf_counter(), batch_cpu_s(spark)
            if profiler:
                profiler.enable()
            result = run_job(spark, bench.settings, job, dbt=dbt, inline_services=False,
                             defer=docs.append)
            if profiler:
                profiler.disable()
            totals.append(time.perf_counter() - t0)
            cpus.append(batch_cpu_s(spark) - c0)
            assert result.counts.get("read") == args.events, result.counts
            steps = {k: v - before.get(k, 0.0) for k, v in timer.steps.items()}
            print(f"batch {n + 1}: {totals[-1]:.2f}s cpu {cpus[-1]:.2f}s " + " ".join(
                f"{k}={v:.2f}" for k, v in steps.items()), flush=True)
        t0 = time.perf_counter()
        deferred.__exit__(None, None, None)
        records_s = (time.perf_counter() - t0) / args.batches
        t0 = time.perf_counter()
        for page in docs:
            page.build()
        docs_s = (time.perf_counter() - t0) / max(1, len(docs))
        print(f"off the batches: run records {records_s:.2f}s per batch (written together), "
              f"Data Docs page {docs_s:.2f}s per batch (the runner's services thread)")
        if profiler:
            profiler.dump_stats(args.cprofile)
        per = {k: v / args.batches for k, v in timer.steps.items()}
        by_statement: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
        for seconds, step, text in timer.sql:
            key = (step, re.sub(r"\d{6,}", "N", text[:70]))
            by_statement[key].append(seconds)
        print("\nstatements by total seconds per batch (step, statement, count/batch, s/batch):")
        ranked = sorted(by_statement.items(), key=lambda kv: -sum(kv[1]))
        for (step, text), values in ranked[:25]:
            print(f"  {step:8s} {sum(values) / args.batches:6.2f}s "
                  f"{len(values) / args.batches:4.1f}x  {text}")
        sql_total = sum(s for s, _, _ in timer.sql) / args.batches
        print(f"\nspark.sql per batch: {sql_total:.2f}s in "
              f"{len(timer.sql) / args.batches:.0f} statements")
        if args.phases:
            phases(spark, timer)
        print(f"profile: events={args.events} batches={args.batches} "
              f"history={int(args.history)} "
              f"median={statistics.median(totals):.2f} cpu_s={statistics.median(cpus):.2f} "
              + " ".join(
                  f"{k}={per.get(k, 0.0):.2f}"
                  for k in ("ingest", "staging", "fork", "validate", "merge", "convert_fork",
                            "apply", "history", "dbt", "status", "record"))
              + f" records_off={records_s:.2f} docs_off={docs_s:.2f}")
    finally:
        bench.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
