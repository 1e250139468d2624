"""The scheduler's promises (docs/runner.md, "How it schedules"), shown in this process on the
shared session, with real jobs on the real broker: with more ready jobs than slots the higher
``priority`` starts first; jobs given slots at once run their batches at the same time, each
job's Spark work in its own pool; ``sluice run --all`` (``run_all``) runs jobs at once and a
failing job stops none of the others; on the step tables' path too, every Spark job of a batch
runs in its job's pool (the staging step's dbt run is single-threaded for it).

When a run started and ended comes from meta.runs (its ``run_id`` from the PipelineResult); to
which pool a run's Spark work went, from the JVM's status store (every stage keeps the
``spark.scheduler.pool`` its job was submitted with, FIFO or FAIR). The shared session is not
started with the FAIR scheduler, so the pools' weights are not exercised here.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from python_ingest.config import Settings, load_settings
from python_ingest.demo import trips as demo
from python_ingest.demo.fleet import topic_of, write_fleet
from python_ingest.kafka.broker import ensure_topic
from python_ingest.runner.scheduler import POOL_PREFIX, JobSlot, Runner
from python_ingest.runtime.session import active, project_session
from python_ingest.steps.dbt import PROJECT_DIR_ENV, Dbt
from python_ingest.steps.pipeline import PipelineResult, run_all
from python_ingest.tables.runs import flush_records
from tests.conftest import REPO, write_config
from tests.steps.helpers import as_lake, lake_rows

pytestmark = pytest.mark.e2e

PREFIX = "promises"
# names sort a, b, c; priorities order them b, c, a: only the priority can put b first
PRIORITIES = {"a": 0, "b": 5, "c": 2}
NO_MODEL = f"{PREFIX}_nomodel"  # a job of the config without a converter: fails at once
EVENTS = 20


@dataclass
class Jobs:
    """Three trips jobs of one dbt project (``write_fleet``), their producers' oracles, and a
    job without a converter model; one set for the module, so that only the first test pays
    for creating the tables."""

    root: Path
    broker: str
    settings: Settings
    dbt: Dbt
    generators: dict[str, demo.TripsGenerator]

    def name(self, key: str) -> str:
        return f"{PREFIX}_{key}"

    def produce(self, keys: str) -> dict[str, int]:
        """``EVENTS`` changelog events for each job of ``keys``; how many each got."""
        return {self.name(k): demo.produce(self.broker, topic_of(self.name(k)),
                                           self.generators[k].events(EVENTS)) for k in keys}

    def slots(self, max_parallel: int) -> Settings:
        return dataclasses.replace(self.settings, runner=dataclasses.replace(
            self.settings.runner, max_parallel_jobs=max_parallel))

    def run_runner(self, spark: Any, max_parallel: int) -> dict[str, JobSlot]:
        """A continuous runner over the three jobs until every one is caught up (at most
        5 minutes, should a batch fail and be retried)."""
        runner = Runner(spark, self.slots(max_parallel), [self.name(k) for k in PRIORITIES],
                        dbt=self.dbt, until_idle=True, duration_s=300)
        slots = runner.run()
        for name, slot in slots.items():
            assert slot.results and not slot.failures, (name, slot)
        return slots

    def assert_lakes(self, spark: Any, keys: str) -> None:
        """Each job's lake table equals its producer's oracle."""
        for key in keys:
            expected = {t: as_lake(r) for t, r in self.generators[key].rows.items()}
            assert lake_rows(spark, f"lake.{self.name(key)}") == expected, key


@pytest.fixture(scope="module")
def jobs(broker: str, workdir: Path,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobs]:
    root = tmp_path_factory.mktemp("promises")
    names = [f"{PREFIX}_{k}" for k in PRIORITIES]
    configs: dict[str, Any] = write_fleet(
        root, names, priorities={f"{PREFIX}_{k}": p for k, p in PRIORITIES.items()})
    configs[NO_MODEL] = {**configs[names[0]], "topic": topic_of(NO_MODEL), "priority": 9}
    for name in names:
        ensure_topic(broker, topic_of(name), 2)
    path = write_config(root / "sluice.yml", workdir, broker, configs,
                        state_dir=str(root / "state"),
                        runner={"poll_interval_s": 0.2, "retry_initial_s": 30})
    settings = load_settings(path, env={})
    generators = {k: demo.TripsGenerator(demo.trips_schema(REPO), seed=40 + i, first_trip_id=1,
                                         malformed_rate=0.0, duplicate_rate=0.0)
                  for i, k in enumerate(PRIORITIES)}
    yield Jobs(root, broker, settings, Dbt(settings, root), generators)


def intervals(spark: Any, results: list[PipelineResult]) -> dict[str, tuple[float, float]]:
    """Each run's [started, finished] (epoch seconds) in meta.runs, by job."""
    ids = ", ".join(f"'{r.run_id}'" for r in results)
    flush_records()  # the records this process holds (tests/conftest.py)
    with active(project_session(spark)) as session:
        rows = session.sql(
            "select job, cast(started_at as double) as started, "
            f"cast(finished_at as double) as finished from meta.runs where run_id in ({ids})"
        ).collect()
    assert len(rows) == len(results), rows
    return {r["job"]: (r["started"], r["finished"]) for r in rows}


def first_batches(spark: Any, slots: dict[str, JobSlot]) -> dict[str, tuple[float, float]]:
    return intervals(spark, [slot.results[0] for slot in slots.values()])


def stages_since(spark: Any, since: float) -> list[tuple[float, str, str]]:
    """The stages submitted since ``since`` (epoch s), from the JVM's status store: when
    each was submitted, its scheduler pool and its name (the call site)."""
    store = spark.sparkContext._jsc.sc().statusStore()
    stages = store.stageList(None, False, False, getattr(store, "stageList$default$4")(),
                             getattr(store, "stageList$default$5")())
    found = []
    for i in range(stages.size()):
        stage = stages.apply(i)
        submitted = stage.submissionTime()
        if submitted.isDefined() and submitted.get().getTime() / 1000 >= since:
            found.append((submitted.get().getTime() / 1000, stage.schedulingPool(),
                          stage.name()))
    return sorted(found)


def stages_by_pool(spark: Any, since: float) -> dict[str, list[float]]:
    """When each stage submitted since ``since`` was submitted, by its scheduler pool."""
    pools: dict[str, list[float]] = {}
    for submitted, pool, _ in stages_since(spark, since):
        pools.setdefault(pool, []).append(submitted)
    return pools


def overlap(a: tuple[float, float], b: tuple[float, float]) -> float:
    """How long two [start, end] intervals overlap (s; 0 when they do not)."""
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def test_with_one_slot_the_ready_jobs_start_by_priority(spark: Any, jobs: Jobs) -> None:
    produced = jobs.produce("abc")
    slots = jobs.run_runner(spark, max_parallel=1)
    for name, slot in slots.items():
        assert slot.results[0].counts["read"] == produced[name], name
    ran = first_batches(spark, slots)
    order = sorted(ran, key=lambda n: ran[n][0])
    assert order == [jobs.name("b"), jobs.name("c"), jobs.name("a")], ran  # 5, 2, 0
    # one slot: each batch started only once the one before it had ended
    for before, after in zip(order, order[1:], strict=False):
        assert ran[after][0] >= ran[before][1], ran
    jobs.assert_lakes(spark, "abc")


def test_with_two_slots_the_two_highest_run_at_once_each_in_its_own_pool(
        spark: Any, jobs: Jobs) -> None:
    produced = jobs.produce("abc")
    since = time.time()
    slots = jobs.run_runner(spark, max_parallel=2)
    for name, slot in slots.items():
        assert slot.results[0].counts["read"] == produced[name], name
    ran = first_batches(spark, slots)
    a, b, c = (ran[jobs.name(k)] for k in "abc")
    # the two highest (5 and 2) started first, at once; the lowest waited for a free slot
    assert max(b[0], c[0]) < a[0], ran
    assert a[0] >= min(b[1], c[1]), ran
    assert overlap(b, c) > 0, f"the batches of b and c did not overlap: {ran}"
    # every stage of a job's pool was submitted while that job's batch ran: its Spark work,
    # and none of another job's, went to its pool
    pools = stages_by_pool(spark, since)
    for key, (start, end) in (("a", a), ("b", b), ("c", c)):
        submitted = pools.get(f"{POOL_PREFIX}{jobs.name(key)}")
        assert submitted, f"no stage in the pool of {key}: {sorted(pools)}"
        assert all(start - 0.01 <= t <= end + 0.01 for t in submitted), (key, start, end)
    # while b and c both ran, both pools had stages: Spark work of the two at once
    both = (max(b[0], c[0]), min(b[1], c[1]))
    for key in "bc":
        assert any(both[0] <= t <= both[1]
                   for t in pools[f"{POOL_PREFIX}{jobs.name(key)}"]), (key, both)
    jobs.assert_lakes(spark, "abc")


def test_run_all_runs_jobs_at_once_and_a_failing_job_stops_none(
        spark: Any, jobs: Jobs, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROJECT_DIR_ENV, raising=False)  # the project beside the config
    produced = jobs.produce("bc")
    b, c = jobs.name("b"), jobs.name("c")
    # two slots; by priority the job without a model (9) and b (5) start, c (2) waits
    results = run_all(spark, jobs.slots(2), [b, c, NO_MODEL], keep_going=True)
    assert [r.job for r in results] == [b, c, NO_MODEL]
    assert [r.outcome for r in results] == ["succeeded", "succeeded", "failed"], results
    assert f"no dbt model reads raw.{NO_MODEL}" in (results[2].error or "")
    assert [r.counts["read"] for r in results[:2]] == [produced[b], produced[c]]
    ran = intervals(spark, results)  # the failed run is recorded too
    assert overlap(ran[b], ran[c]) > 0, f"the runs of b and c did not overlap: {ran}"
    # c took the slot the failed job left: the failure stopped nothing after it
    assert ran[c][0] >= ran[NO_MODEL][1], ran
    jobs.assert_lakes(spark, "bc")



def test_a_step_tables_batch_runs_all_its_spark_work_in_its_pool(spark: Any, jobs: Jobs) -> None:
    name = jobs.name("a")
    settings = jobs.slots(1)
    job = dataclasses.replace(settings.job(name), keep_step_tables=True)  # dbt: staging, merge
    settings = dataclasses.replace(settings, jobs={**settings.jobs, name: job})
    produced = jobs.produce("a")
    since = time.time()
    slots = Runner(spark, settings, [name], dbt=jobs.dbt, until_idle=True, duration_s=300).run()
    result = slots[name].results[0]
    assert result.counts["read"] == produced[name], result
    start, end = intervals(spark, [result])[name]
    # one job, its records written when the runner stops: all Spark work in [start, end] is its
    during = [(pool, stage) for t, pool, stage in stages_since(spark, since) if start <= t <= end]
    assert any(pool == f"{POOL_PREFIX}{name}" for pool, _ in during), during
    elsewhere = [(pool, stage) for pool, stage in during if pool != f"{POOL_PREFIX}{name}"]
    assert not elsewhere, f"stages of {name}'s batch outside its pool: {elsewhere}"
    jobs.assert_lakes(spark, "a")
