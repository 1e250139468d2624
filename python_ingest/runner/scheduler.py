"""The continuous runner: every job of one process, batch after batch, in parallel by priority.

One SparkSession (cloned per job: ``runtime.session.job_session``), one dbt manifest, one
process. The main thread polls the end offsets of every job's topic (``offsets.ClusterEnds``)
every ``runner.poll_interval_s``; a job whose topic holds messages past its checkpoint, or
that has never run in this process, or whose retry is due, gets a slot, at most
``runner.max_parallel_jobs`` at once, higher ``priority`` first, then the larger backlog.
Each job thread runs one batch (``steps.pipeline.run_job``: ingest, staging, fork, merge,
reports) in its job's Spark FAIR pool (weight ``1 + priority``) and reports back.

Table services run apart from the batches: when a batch makes a job's services due (its
``services:`` settings, or every ``runner.maintain_every`` batches), its run ends without
them and the services thread runs them next, in the FAIR pool ``sluice_services`` (weight 1),
recorded as a run of their own (outcome ``maintained``). A batch's lake commit, its run record
and the batch slot are never held up by a compaction. The job's own next batch waits for its
services (a job's tables have one writer at a time), so they wait for a quiet moment: they are
queued once the job's topic has had nothing new for ``runner.services_quiet_s`` after its
batch, or, for a job that is never quiet, before its ``runner.services_max_deferred``-th batch
after they fell due (a batch arriving right behind a batch no longer waits for a compaction).

Several runners on one warehouse (one host or several) split the jobs: each runs only the
jobs it claims (runner/claims.py), its fair share, and takes over a dead runner's.

A failing job (a broken converter, its topic gone, the broker down) is recorded in meta.runs
and the status file, retried after ``retry_initial_s`` doubling up to ``retry_max_s``, and
never stops the others. An idle job costs one end-offsets request per poll and no Spark job;
an idle files job (source: files) one listing of its landing dir (docs/files-source.md).

Stopping: the first SIGTERM or SIGINT lets the batches in flight finish (every step commits
its checkpoint with its data, so a batch is either committed or left for the next start) and
starts no new one; a second signal exits at once, which is as safe as kill -9: the next start
resumes from the last committed checkpoints (docs/runner.md).
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from types import FrameType
from typing import TYPE_CHECKING, Any

from python_ingest.config import Settings
from python_ingest.exceptions import SluiceError
from python_ingest.kafka.offsets import ClusterEnds, backlog
from python_ingest.runner.claims import Claims
from python_ingest.runner.slots import (  # noqa: F401 (names the runner's callers import)
    SERVICES_POOL,
    JobSlot,
    Services,
    fair_scheduler_conf,
)
from python_ingest.runtime.session import POOL_PREFIX
from python_ingest.tables.runs import records_deferred
from python_ingest.tables.status import StatusFile, now_iso

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from python_ingest.steps.dbt import Dbt
    from python_ingest.steps.fork.split import DocsJob
    from python_ingest.steps.pipeline import PipelineResult

log = logging.getLogger(__name__)

class Runner:
    """Runs ``names`` continuously until stopped (a signal, ``duration_s``, or, with
    ``until_idle``, once every job it holds is caught up and none is failing). Of the jobs,
    it runs those it claims (runner/claims.py: its share when other runners share the
    warehouse)."""

    def __init__(self, spark: SparkSession, settings: Settings, names: list[str],
                 dbt: Dbt | None = None, duration_s: float | None = None,
                 until_idle: bool = False, accept_data_loss: bool = False) -> None:
        from python_ingest.steps.dbt import Dbt

        self.spark = spark
        self.settings = settings
        self.config = settings.runner
        self.slots = {n: JobSlot(settings.job(n)) for n in names}
        self.dbt = dbt or Dbt(settings)
        self.duration_s = duration_s
        self.until_idle = until_idle
        self.accept_data_loss = accept_data_loss
        self.stop = threading.Event()
        self.status = StatusFile(settings.path(settings.state_dir))
        self._sessions: dict[str, SparkSession] = {}
        self.claims: Claims | None = None  # which of the jobs this runner runs (claims.py)
        self._shown: dict[str, str] = {}  # what the status file says of each job's claim
        self._signals = 0
        self._lock = threading.Lock()
        self._services_pool: ThreadPoolExecutor | None = None

    # -- signals ---------------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._signals > 1:
            log.warning("second signal: exiting now; the next start resumes from the last "
                        "committed checkpoints")
            os._exit(130)
        log.warning("%s: finishing the batches in flight, starting no new one (signal again "
                    "to exit at once)", signal.Signals(signum).name)
        self.stop.set()

    def _install_signals(self) -> list[tuple[int, Any]]:
        if threading.current_thread() is not threading.main_thread():
            return []
        saved: list[tuple[int, Any]] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            saved.append((sig, signal.signal(sig, self._on_signal)))
        return saved

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> dict[str, JobSlot]:
        """Run until stopped; each job's slot (its results and failures). Run records go to
        meta.runs together every 30 s and at the end (``records_deferred``): the shared
        table's commit stays off each batch's path."""
        with records_deferred(self.spark):
            return self._run()

    def _run(self) -> dict[str, JobSlot]:
        names = sorted(self.slots)
        saved = self._install_signals()
        offsets = ClusterEnds()  # each job's own cluster (Settings.kafka_for)
        started = time.monotonic()
        self.dbt.prepare(names)  # saved or parsed once, before the first batch
        self.claims = Claims(self.spark, {n: s.job.priority for n, s in self.slots.items()})
        self._claims_changed(self.claims.refresh(self._busy, force=True))
        self.status.record_runner("running", names, max_parallel_jobs=self.config.max_parallel_jobs)
        log.info("runner: %d job(s), at most %d at once, polling every %.1fs", len(names),
                 self.config.max_parallel_jobs, self.config.poll_interval_s)
        pool = ThreadPoolExecutor(self.config.max_parallel_jobs, thread_name_prefix="sluice-job")
        services = ThreadPoolExecutor(1, thread_name_prefix="sluice-services")
        self._services_pool = services
        inflight: dict[Future[None], JobSlot] = {}
        servicing: dict[Future[None], JobSlot] = {}
        try:
            while not self.stop.is_set():
                self._claims_changed(self.claims.refresh(self._busy))
                self._poll(offsets)
                now = time.monotonic()
                for slot in self.slots.values():  # deferred services, in a quiet moment
                    if self._quiet(slot, now):
                        slot.servicing = True
                        self._queue_services(slot, services, servicing)
                due = sorted((s for s in self.slots.values()
                              if s.due(now) and self._claimed(s.job.name)),
                             key=lambda s: (-s.job.priority,
                                            -(s.backlog if s.backlog is not None else math.inf),
                                            s.job.name))
                for slot in due[:self.config.max_parallel_jobs - len(inflight)]:
                    slot.running = True
                    inflight[pool.submit(self._batch, slot)] = slot
                if self.duration_s is not None and now - started >= self.duration_s:
                    log.info("runner: %.0fs passed, stopping", self.duration_s)
                    break
                if self.until_idle and not inflight and not servicing and not due \
                        and self._idle():
                    log.info("runner: every job %s, stopping", "is caught up" if any(
                        self._claimed(n) for n in names) else "is run by another runner")
                    break
                self.status.record_runner("running", names)
                if inflight:
                    done, _ = wait(list(inflight), timeout=self.config.poll_interval_s,
                                   return_when=FIRST_COMPLETED)
                    for future in done:
                        self._queue_services(inflight.pop(future), services, servicing)
                else:
                    self.stop.wait(self.config.poll_interval_s)
                for future in [f for f in servicing if f.done()]:
                    servicing.pop(future)
        finally:
            self.status.record_runner("stopping", names)
            wait(list(inflight))  # the batches in flight finish: their commits are whole
            for future, slot in servicing.items():
                if future.cancel():  # queued, not started: due again after a later batch
                    slot.servicing = False
            wait(list(servicing))  # services in flight finish (a second signal exits at once)
            services.shutdown()
            pool.shutdown()
            offsets.close()
            self.status.record_runner("stopped", names)
            for name in names:
                if not self.slots[name].failures and self.claims.holds(name):
                    self.status.update_job(name, state="stopped")
            self.claims.close()
            for sig, handler in saved:
                signal.signal(sig, handler)
        return self.slots

    def _idle(self) -> bool:
        return all(s.checkpoint is not None and not s.backlog and not s.failures
                   and not s.servicing and s.services is None
                   for s in self.slots.values() if self._claimed(s.job.name))

    def _quiet(self, slot: JobSlot, now: float) -> bool:
        """Whether ``slot``'s deferred services should be queued now: its topic has had
        nothing new since its batch for ``services_quiet_s`` (at once when running until
        idle: nothing more is coming)."""
        if slot.services is None or slot.servicing or slot.running or slot.backlog:
            return False
        return self.until_idle or now - slot.finished_at >= self.config.services_quiet_s

    # -- claims: which jobs this runner runs beside others on the warehouse ----------------

    def _busy(self, name: str) -> bool:
        return self.slots[name].running or self.slots[name].servicing

    def _claimed(self, name: str) -> bool:
        return self.claims is not None and self.claims.holds(name)

    def _claims_changed(self, changed: bool) -> None:
        """The status file's word on each job this runner does not run (``elsewhere``, held
        by whom) or newly runs (``idle``); only on change."""
        assert self.claims is not None
        if not changed and self._shown:
            return
        for name, slot in self.slots.items():
            held = self.claims.holds(name)
            holder = self.claims.elsewhere.get(name) or {}
            shown = "held" if held else f"elsewhere:{holder.get('pid')}"
            if self._shown.get(name) == shown:
                continue
            self._shown[name] = shown
            if held:
                self.status.update_job(name, state="idle", priority=slot.job.priority,
                                       held_by=None)
            else:
                log.info("runner: job %s is run by another runner (pid %s on %s)", name,
                         holder.get("pid", "?"), holder.get("host", "?"))
                self.status.update_job(name, state="elsewhere", priority=slot.job.priority,
                                       held_by={k: holder.get(k) for k in ("host", "pid")})

    def _poll(self, offsets: ClusterEnds) -> None:
        """Every job's backlog from its topic's end offsets and its last checkpoint; a files job's
        is its count of ready unprocessed partitions (a listing of its landing dir)."""
        files = [s for s in self.slots.values() if s.job.files is not None]
        kafka = [s for s in self.slots.values() if s.job.files is None]
        for slot in files:
            self._set_backlog(slot, _files_backlog(slot))
        if not kafka:
            return
        problems: list[str] = []
        ends = offsets.end({s.job.name: (self.settings.kafka_for(s.job), s.job.topic)
                            for s in kafka}, problems)
        for problem in problems:
            log.warning("runner: %s (retrying every poll)", problem)
        for slot in kafka:
            if slot.job.name not in ends:  # its cluster did not answer
                continue
            found = ends[slot.job.name]
            # no message ever: nothing to catch up on until its first (`latest` pins its start)
            if slot.checkpoint is None and found and not any(found.values()) \
                    and slot.job.starting_offsets == "earliest":
                slot.checkpoint = {"offsets": {}}
            self._set_backlog(slot, backlog(found, slot.checkpoint))

    def _set_backlog(self, slot: JobSlot, behind: int | None) -> None:
        if behind is not None and behind != slot.backlog:
            self.status.update_job(slot.job.name, backlog=behind)  # on change only
        slot.backlog = behind

    # -- one batch -------------------------------------------------------------------------

    def _session(self, name: str) -> SparkSession:
        from python_ingest.runtime.session import job_session

        with self._lock:
            if name not in self._sessions:
                self._sessions[name] = job_session(self.spark, self.settings,
                                                   self.settings.job(name))
            return self._sessions[name]

    def _batch(self, slot: JobSlot) -> None:
        """One run of the job in this thread, on its own session and FAIR pool."""
        from python_ingest.runtime.session import activate
        from python_ingest.steps.pipeline import run_job

        name = slot.job.name
        session = self._session(name)
        activate(session)
        session.sparkContext.setLocalProperty("spark.scheduler.pool", f"{POOL_PREFIX}{name}")
        self.status.update_job(name, state="running", running_since=now_iso())
        try:
            if slot.failures:
                self.dbt.reload_if_changed()  # the fix may be an edited model
            result = run_job(session, self.settings, slot.job, self.accept_data_loss, self.dbt,
                             inline_services=False, defer=self._defer_docs)
            if result.outcome == "succeeded":
                slot.batches += 1
                self._services_due(slot, result)
        except Exception as exc:
            slot.failures += 1
            wait_s = min(self.config.retry_max_s,
                         self.config.retry_initial_s * 2 ** (slot.failures - 1))
            slot.retry_at = time.monotonic() + wait_s
            if not isinstance(exc, SluiceError):
                log.exception("job %s failed", name)
            log.warning("job %s failed (%d in a row): %s; retrying in %.0fs", name,
                        slot.failures, exc, wait_s)
            self.status.update_job(name, state="retrying", running_since=None,
                                   next_retry_at=_in(wait_s), failures=slot.failures)
            return
        finally:
            slot.finished_at = time.monotonic()  # before running: _quiet reads both
            slot.running = False
        slot.failures, slot.retry_at = 0, 0.0
        if result.checkpoint is not None:
            slot.checkpoint = {"offsets": {str(p): o for p, o in
                                           result.checkpoint.offsets.items()}}
            if result.checkpoint.files is not None:
                slot.checkpoint["files"] = result.checkpoint.files.to_dict()
        elif slot.checkpoint is None:
            slot.checkpoint = {"offsets": {}}
        slot.results.append(result)
        self.status.update_job(name, state="idle", running_since=None)

    def _defer_docs(self, docs: DocsJob) -> None:
        """A fork's Data Docs page, built on the services thread, off the batch's path (here
        when stopping); a report never fails a batch that committed."""
        try:
            if self._services_pool is None:
                raise RuntimeError("no services thread")
            self._services_pool.submit(docs.build_quietly)
        except RuntimeError:
            docs.build_quietly()

    # -- table services, apart from the batches --------------------------------------------

    def _services_due(self, slot: JobSlot, result: PipelineResult) -> None:
        """Note the services ``result``'s batch made due, joined to those deferred before.
        They wait for a quiet moment (``_quiet``) unless they may wait no longer
        (``services_quiet_s`` 0, or ``services_max_deferred`` batches since they fell due):
        then the job stays busy (``servicing``) from before its batch ends until they ran, so
        its next batch never overlaps them."""
        from python_ingest.steps.services import services_due

        every = self.config.maintain_every
        maintain = bool(every) and slot.batches % every == 0
        due = Services(result.tables, result.merged, maintain) \
            if maintain or services_due(slot.job, result.merged) else None
        if slot.services is not None:
            slot.services, slot.deferred = slot.services.joined(due), slot.deferred + 1
        elif due is not None:
            slot.services, slot.deferred = due, 0
        else:
            return
        if self.config.services_quiet_s <= 0 \
                or slot.deferred >= self.config.services_max_deferred:
            slot.servicing = True

    def _queue_services(self, slot: JobSlot, executor: ThreadPoolExecutor,
                        servicing: dict[Future[None], JobSlot]) -> None:
        """Hand the services due of ``slot`` to the services thread when they may wait no
        longer (``servicing``); else they stay deferred."""
        if slot.services is None or not slot.servicing:
            return
        due, slot.services, slot.deferred = slot.services, None, 0
        if self.stop.is_set():  # stopping: due again after a later batch
            slot.servicing = False
            return
        servicing[executor.submit(self._run_services, slot, due)] = slot

    def _run_services(self, slot: JobSlot, due: Services) -> None:
        """The job's due services in this thread, under its lease, in the services pool;
        recorded as a run of their own. A failure is logged and recorded, never raised: the
        data is committed and the services catch up when next due."""
        from python_ingest.runtime.session import activate
        from python_ingest.steps.services import (
            due_services,
            maintain_job,
            maintained_as_details,
            record_services,
        )
        from python_ingest.tables.lease import job_lease
        from python_ingest.tables.runs import Run

        name = slot.job.name
        run = Run(job=name, details={"after_batches": due.merged})
        done: list[dict[str, Any]] = []
        session = self.spark
        try:
            session = self._session(name)
            activate(session)
            session.sparkContext.setLocalProperty("spark.scheduler.pool", SERVICES_POOL)
            self.status.update_job(name, state="maintaining")
            with job_lease(session, name):
                if due.maintain:  # every table of the job, the lake's compaction included
                    done = maintained_as_details(maintain_job(session, self.dbt, slot.job))
                elif due.tables is not None:
                    done = due_services(session, slot.job, due.tables, due.merged)
        except Exception as exc:
            log.exception("job %s: table services failed (they run again when next due)", name)
            run.error = f"{type(exc).__name__}: {exc}"
        else:
            log.info("job %s: table services in %.1fs: %s", name, run.duration_s,
                     "; ".join(f"{d['service']} {d.get('table', '')}".strip() for d in done))
        finally:
            try:
                self.status.update_job(name, state="idle", services={
                    "at": now_iso(), "duration_s": round(run.duration_s, 3),
                    "done": [d["service"] for d in done], "error": run.error})
                record_services(session, name, run, done, run.error)
            finally:
                slot.servicing = False  # whatever happened: the job runs again


def _files_backlog(slot: JobSlot) -> int | None:
    """A files job's ready unprocessed partitions (None: it has not run here yet)."""
    from python_ingest.sources.files.partitions import ready_backlog
    from python_ingest.tables.checkpoints import ProcessedPartitions

    if slot.checkpoint is None or slot.job.files is None:
        return None
    processed = ProcessedPartitions.from_dict(slot.checkpoint.get("files") or {})
    try:
        return ready_backlog(slot.job.files, processed)
    except OSError as exc:  # the landing dir unreadable for now: the run will say why
        log.warning("runner: job %s: cannot list %s: %s", slot.job.name, slot.job.files.path,
                    exc)
        return None


def _in(seconds: float) -> str:
    from datetime import UTC, datetime, timedelta

    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat(timespec="seconds")

