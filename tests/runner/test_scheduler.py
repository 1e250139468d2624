"""The runner's bookkeeping of table services between a job's batches (no Spark: the
end-to-end proof is tests/runner/test_runner.py)."""

from __future__ import annotations

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

    def __init__(self, maintain_every: int) -> None:
        self.config = RunnerConfig(max_parallel_jobs=1, maintain_every=maintain_every)


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
