"""The runner's bookkeeping of table services between a job's batches (no Spark: the
end-to-end proof is tests/runner/test_runner.py)."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

from python_ingest.config import JobConfig
from python_ingest.config.runner import RunnerConfig
from python_ingest.config.services import ServicesConfig
from python_ingest.runner.scheduler import JobSlot, Runner, Services
from python_ingest.steps.pipeline import PipelineResult
from python_ingest.steps.services import services_due


def _job(**services: Any) -> JobConfig:
    return JobConfig("trips", "trips", None, ("trip_id",),
                     services=ServicesConfig(**services))


class _Bare(Runner):
    """The runner's services bookkeeping without a session or a loop."""

    def __init__(self, maintain_every: int, quiet_s: float = 0.0, max_deferred: int = 5,
                 until_idle: bool = False) -> None:
        self.config = RunnerConfig(max_parallel_jobs=1, maintain_every=maintain_every,
                                   services_quiet_s=quiet_s, services_max_deferred=max_deferred)
        self.until_idle = until_idle
        self.stop = threading.Event()


def test_services_fall_due_after_every_nth_merged_batch() -> None:
    job = _job(compact_every=5, index_compact_every=20)
    assert not services_due(job, [])
    assert not services_due(job, [1, 2, 3, 4])
    assert services_due(job, [4, 5])  # a run that merged several batches
    assert services_due(job, [20])
    assert not services_due(_job(compact_every=0, index_compact_every=0,
                                 steps_compact_every=0), [5, 10, 20])
    # the step tables' small files: after every steps_compact_every-th (default 20)
    assert services_due(_job(compact_every=0, index_compact_every=0), [20])
    assert not services_due(_job(compact_every=0, index_compact_every=0), [5, 10])


def test_a_job_with_services_due_is_not_run_again_until_they_ran() -> None:
    runner = _Bare(maintain_every=3)
    slot = JobSlot(_job(compact_every=2, index_compact_every=0), checkpoint={}, backlog=10)
    assert slot.due(0.0)
    for batch, expected in ((1, None), (2, Services(None, [2], False)),
                            (3, Services(None, [3], True))):
        slot.batches = batch
        runner._services_due(slot, PipelineResult("trips", "r", "succeeded", batch,
                                                  merged=[batch]))
        assert slot.services == expected
        # noted while the batch still runs: no moment in which the next batch could start
        assert slot.servicing is (expected is not None)
        assert not slot.due(0.0) or expected is None
        slot.services, slot.servicing = None, False


def test_due_services_wait_for_a_quiet_moment_or_for_max_deferred_batches() -> None:
    """With ``services_quiet_s``, services a batch made due do not hold the job's next batch
    back: they are queued once the job has had nothing new that long after its batch (at once
    when running until idle), joined with those later batches made due; a job never quiet
    runs them before its ``services_max_deferred``-th batch after they fell due."""
    runner = _Bare(maintain_every=0, quiet_s=5.0, max_deferred=2)
    slot = JobSlot(_job(compact_every=2, index_compact_every=0), checkpoint={}, backlog=10)
    submitted: list[Services] = []

    class _Executor:
        def submit(self, fn: Any, slot_: JobSlot, due: Services) -> Future[None]:
            submitted.append(due)
            return Future()

    def batch(number: int) -> None:
        slot.batches = number
        runner._services_due(slot, PipelineResult("trips", "r", "succeeded", number,
                                                  merged=[number]))
        slot.finished_at = 100.0 + number
        runner._queue_services(slot, _Executor(), {})  # the batch's future completed

    batch(2)  # compaction due: deferred, the job may take its next batch at once
    assert slot.services == Services(None, [2], False) and not slot.servicing
    assert slot.due(0.0) and submitted == []
    assert not runner._quiet(slot, 200.0)  # messages are waiting
    batch(3)  # a batch right behind: the services wait on
    assert slot.services == Services(None, [2], False) and not slot.servicing
    batch(4)  # the 2nd batch since they fell due: they may wait no longer (joined with
    assert slot.servicing and not slot.due(0.0)  # those it made due)
    assert submitted == [Services(None, [2, 4], False)] and slot.services is None
    slot.servicing = False

    batch(6)  # due again; then the topic stays quiet
    slot.backlog = 0
    assert not runner._quiet(slot, 106.0 + 4.9)
    assert runner._quiet(slot, 106.0 + 5.0)
    assert _Bare(0, quiet_s=5.0, until_idle=True)._quiet(slot, 106.5)
    slot.running = True
    assert not runner._quiet(slot, 200.0)  # never beside its own batch


class _Polled(Runner):
    """The runner's poll over jobs without a session, a broker or a status file."""

    def __init__(self, jobs: list[JobConfig]) -> None:
        from python_ingest.config import load_settings

        self.slots = {j.name: JobSlot(j) for j in jobs}
        self.status = type("Status", (), {"update_job": lambda *a, **k: None})()
        self.settings = load_settings(None, env={})  # kafka_for: the project's cluster


class _Ends:
    """ClusterEnds' interface over fixed end offsets by topic: {job: (servers, topic)} ->
    {job: ends} (a topic that does not exist: no ends, as the broker answers)."""

    def __init__(self, ends: dict[str, dict[int, int]]) -> None:
        self.ends = ends

    def end(self, wanted: dict[str, tuple[str, str]], problems: Any = None
            ) -> dict[str, dict[int, int]]:
        return {job: self.ends.get(topic, {}) for job, (_servers, topic) in wanted.items()}


def test_a_job_whose_topic_never_held_a_message_costs_no_run_until_its_first() -> None:
    idle, busy = JobConfig("idle", "idle", None, ("k",)), JobConfig("busy", "busy", None, ("k",))
    latest = JobConfig("latest", "latest", None, ("k",), starting_offsets="latest")
    gone = JobConfig("gone", "gone", None, ("k",))  # no such topic: run, to say so
    runner = _Polled([idle, busy, latest, gone])
    ends = _Ends({"idle": {0: 0, 1: 0}, "busy": {0: 3, 1: 0}, "latest": {0: 0}})
    runner._poll(ends)  # type: ignore[arg-type]
    due = {name for name, slot in runner.slots.items() if slot.due(0.0)}
    assert due == {"busy", "latest", "gone"}  # `latest` pins its start on its first run
    ends.ends["idle"] = {0: 2, 1: 0}  # its first messages
    runner._poll(ends)  # type: ignore[arg-type]
    assert runner.slots["idle"].due(0.0) and runner.slots["idle"].backlog == 2


def test_the_services_deferral_is_configured_and_checked() -> None:
    import pytest

    from python_ingest.config.runner import parse_runner
    from python_ingest.exceptions import ConfigError

    assert (RunnerConfig().services_quiet_s, RunnerConfig().services_max_deferred) == (5.0, 5)
    config = parse_runner({"services_quiet_s": 0, "services_max_deferred": 3})
    assert (config.services_quiet_s, config.services_max_deferred) == (0.0, 3)
    with pytest.raises(ConfigError, match="runner.services_quiet_s"):
        parse_runner({"services_quiet_s": -1})
