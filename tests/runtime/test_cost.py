"""A run's cost is its Spark tasks' time, by job group (issue #34.6): two runs on two threads
at once are metered apart, their costs never counting the same task twice, on the real
session."""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

import pytest

from python_ingest.runtime.cost import GROUP, Cost, Meter, metered


def _sleep_tasks(spark: Any, ms: int, tasks: int = 1) -> None:
    """One Spark job whose ``tasks`` tasks each sleep ``ms`` in the JVM (run time, no CPU)."""
    spark.range(tasks, numPartitions=tasks).selectExpr(
        f"reflect('java.lang.Thread', 'sleep', cast({ms} + id * 0 as bigint))").collect()


@pytest.mark.e2e
def test_two_threads_at_once_are_metered_apart_without_double_counting(spark: Any) -> None:
    meters: dict[str, Meter] = {}
    spans: dict[str, tuple[float, float]] = {}
    start = threading.Barrier(2)

    def run(group: str, ms: int) -> None:
        with metered(spark, group) as meter:
            start.wait()
            t0 = time.monotonic()
            _sleep_tasks(spark, ms)
            spans[group] = (t0, time.monotonic())
        meters[group] = meter

    _sleep_tasks(spark, 1)  # warm: the first task of a query compiles and loads its classes
    long, short = f"cost-long-{time.time_ns()}", f"cost-short-{time.time_ns()}"
    threads = [threading.Thread(target=run, args=(long, 2000)),
               threading.Thread(target=run, args=(short, 500))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert spans[short][1] < spans[long][1] and spans[long][0] < spans[short][1]  # overlapped

    a, b = meters[long].cost(), meters[short].cost()
    assert a is not None and b is not None
    # each its own task only: the other's would add 0.5 s or 2 s
    # (upper bounds loose: a loaded machine stretches a task's time, never shortens a sleep)
    assert 2.0 <= a.executor_s < 4.0 and (a.jobs, a.stages) == (1, 1), a
    assert 0.5 <= b.executor_s < a.executor_s and (b.jobs, b.stages) == (1, 1), b
    assert a.cpu_s <= a.executor_s and b.cpu_s <= b.executor_s
    assert a.cpu_s < 0.5 and b.cpu_s < 0.5  # sleeping
    # both together fit the cores over the time they ran; wall × cores charged each with all
    cores = spark.sparkContext.defaultParallelism
    wall = max(s[1] for s in spans.values()) - min(s[0] for s in spans.values())
    assert a.executor_s + b.executor_s <= wall * cores
    assert a.executor_s < (spans[long][1] - spans[long][0]) * cores
    assert b.executor_s < (spans[short][1] - spans[short][0]) * cores


@pytest.mark.e2e
def test_cpu_time_is_within_run_time_and_an_empty_group_costs_nothing(spark: Any) -> None:
    sc = spark.sparkContext
    group = sc.getLocalProperty(GROUP)
    with metered(spark, f"cost-cpu-{time.time_ns()}") as busy:
        spark.range(0, 30_000_000, 1, 2).selectExpr("sum(hash(id, id * 3))").collect()
    with metered(spark, f"cost-idle-{time.time_ns()}") as idle:
        pass
    spark.range(10).collect()  # after the block: in no group
    cost = busy.cost()
    assert cost is not None and cost.jobs >= 1 and cost.stages >= 1
    assert 0 < cost.cpu_s <= cost.executor_s
    assert idle.cost() == Cost(0.0, 0.0, 0, 0)
    assert sc.getLocalProperty(GROUP) == group


@pytest.mark.e2e
def test_the_innermost_meter_gets_the_jobs_and_the_group_before_comes_back(spark: Any) -> None:
    sc = spark.sparkContext
    outer_group, inner_group = f"cost-outer-{time.time_ns()}", f"cost-inner-{time.time_ns()}"
    group, description = sc.getLocalProperty(GROUP), sc.getLocalProperty("spark.job.description")
    _sleep_tasks(spark, 1)  # warm
    with metered(spark, outer_group, "outer") as outer:
        _sleep_tasks(spark, 300)
        with metered(spark, inner_group) as inner:
            _sleep_tasks(spark, 600, tasks=2)
        assert sc.getLocalProperty(GROUP) == outer_group
        assert sc.getLocalProperty("spark.job.description") == "outer"
    assert sc.getLocalProperty(GROUP) == group  # what the thread had before (an earlier
    assert sc.getLocalProperty("spark.job.description") == description  # test's, maybe)
    outer_cost, inner_cost = outer.cost(), inner.cost()
    assert outer_cost is not None and inner_cost is not None
    assert 0.3 <= outer_cost.executor_s < inner_cost.executor_s and outer_cost.jobs == 1
    assert 1.2 <= inner_cost.executor_s < 3.2 and inner_cost.jobs == 1  # two tasks


@pytest.mark.e2e
def test_reading_the_cost_of_forty_jobs_is_cheap(spark: Any) -> None:
    """Read once per batch, which runs about forty Spark jobs: a few py4j calls, not a few
    per job and stage (that took 80-230 ms here)."""
    with metered(spark, f"cost-many-{time.time_ns()}") as meter:
        for i in range(20):  # two jobs each (adaptive execution runs the shuffle apart)
            spark.range(100 + i).selectExpr("sum(id)").collect()
    meter.cost()  # the first read in the process sets up Jackson's serializers
    timings, costs = [], []
    for _ in range(5):
        t0 = time.perf_counter()
        costs.append(meter.cost())
        timings.append(time.perf_counter() - t0)
    assert all(c == costs[0] for c in costs) and costs[0] is not None
    assert costs[0].jobs == 40 and costs[0].stages >= 40
    print(f"cost of {costs[0].jobs} jobs read in "
          f"{', '.join(f'{t * 1000:.1f}' for t in timings)} ms")
    # (the figure, a few ms, is docs/runner.md's; here only that it is not per job and stage)
    assert statistics.median(timings) < 0.5, timings
