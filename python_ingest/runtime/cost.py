"""What a run costs: the seconds its Spark tasks ran, not its wall time × cores.

Wall time × cores charges a run every core for every second, busy or idle, and charges the
same cores to each of two runs that share them. Spark measures better: every task reports
its executor run time and the CPU time of its JVM thread, and the driver's status store (the
Spark UI's data, kept with the UI off) sums them per stage. ``metered`` puts the calling
thread's Spark jobs in a job group; ``Meter.cost`` sums the stages of that group's jobs::

    with metered(spark, run.run_id) as meter:
        ...  # the run's Spark work, on this thread
    cost = meter.cost()  # Cost(executor_s=..., cpu_s=...)

A job group is a local property of the thread that submits the job, and pyspark pins each
Python thread to a JVM thread of its own: two runs on two threads are metered apart. A thread
the run starts does not inherit the group (dbt's model threads: the pipeline runs dbt
``--single-threaded``); Spark's own threads (broadcasts, subqueries) do. The
innermost meter of a thread gets its jobs. A stage that jobs of two groups share while both
run counts in both.

CPU time is the JVM's: the time tasks spend in Python workers (the Kafka read's
``mapInArrow``) is in executor time only. A stage evicted from the status store before the
cost is read (``spark.ui.retainedStages``, 1000, over all threads) is missed.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

GROUP = "spark.jobGroup.id"  # what SparkContext.setJobGroup sets, per thread
INTERRUPT = "spark.job.interruptOnCancel"
DESCRIPTION = "spark.job.description"
DRAIN_TIMEOUT_MS = 2000  # for the listener bus to deliver the group's last task ends
_STAGES = "org.apache.spark.status.StageDataWrapper"
_STAGE_DATA = "org.apache.spark.status.api.v1.StageData"
_SUMMED = {"executorRunTime", "executorCpuTime"}  # ms, ns


@dataclass(frozen=True)
class Cost:
    """The task time of a group's jobs: ``executor_s`` the tasks' run time summed (seconds of
    executor cores they held), ``cpu_s`` the CPU time of their JVM threads within it."""

    executor_s: float = 0.0
    cpu_s: float = 0.0
    jobs: int = 0
    stages: int = 0  # stage attempts summed

    def as_dict(self) -> dict[str, float]:
        """The figures records keep (status file, meta.runs)."""
        return {"executor_s": round(self.executor_s, 3), "cpu_s": round(self.cpu_s, 3)}


class _Store:
    """The driver's JVM objects a cost is read from, made once per SparkContext: the listener
    bus, the status tracker, the status store's KVStore, and a Jackson mapper that writes a
    stage as the two figures summed (one py4j call for all stages instead of several each)."""

    def __init__(self, sc: SparkContext) -> None:
        jvm, gateway, context = sc._jvm, sc._gateway, sc._jsc.sc()
        assert jvm is not None and gateway is not None  # a running SparkContext's
        self.bus = context.listenerBus()
        self.tracker = sc._jsc.statusTracker()
        self.kv = context.statusStore().store()
        self.arrays = jvm.java.util.Arrays
        self.stages = jvm.java.lang.Class.forName(_STAGES)
        self.mapper = jvm.com.fasterxml.jackson.databind.ObjectMapper()
        scala = getattr(jvm.com.fasterxml.jackson.module.scala, "DefaultScalaModule$")
        self.mapper.registerModule(getattr(scala, "MODULE$"))
        self._keep_only(gateway, self.stages, {"info", "jobIds"})
        self._keep_only(gateway, jvm.java.lang.Class.forName(_STAGE_DATA), _SUMMED)

    def _keep_only(self, gateway: Any, cls: Any, keep: set[str]) -> None:
        """Have the mapper write only the properties ``keep`` of ``cls`` (Jackson ignorals
        of all its other fields, set before its first use)."""
        jvm = gateway.jvm
        fields = cls.getDeclaredFields()
        listed = gateway.new_array(jvm.java.lang.Object, len(fields))
        jvm.java.lang.System.arraycopy(fields, 0, listed, 0, len(fields))  # py4j passes
        # a Field[] to no Object[] parameter; its text: "private final long a.b.C.name, ..."
        text = str(self.arrays.toString(listed)).strip("[]")
        drop = sorted({f.rsplit(".", 1)[-1] for f in text.split(", ") if f} - keep)
        names = jvm.java.util.regex.Pattern.compile(",").split(",".join(drop))
        ignorals = jvm.com.fasterxml.jackson.annotation.JsonIgnoreProperties.Value
        self.mapper.configOverride(cls).setIgnorals(ignorals.forIgnoredProperties(names))

    def cost(self, group: str, since_ms: int) -> Cost:
        from py4j.protocol import Py4JJavaError

        try:  # the status store is fed by the listener bus, behind the jobs themselves
            self.bus.waitUntilEmpty(DRAIN_TIMEOUT_MS)
        except Py4JJavaError:
            log.warning("Spark's listener bus did not drain in %d ms: the cost of job group "
                        "%s may miss its last tasks", DRAIN_TIMEOUT_MS, group)
        text = str(self.arrays.toString(self.tracker.getJobIdsForGroup(group)))
        jobs = {int(i) for i in text.strip("[]").split(",") if i.strip()}
        if not jobs:
            return Cost()
        # the stage attempts that ended since the meter began (skipped ones never end)
        view = self.kv.view(self.stages).index("completionTime").first(since_ms)
        run_ms = cpu_ns = stages = 0
        for stage in json.loads(str(self.mapper.writeValueAsString(view))):
            if jobs.intersection(stage["jobIds"]):
                run_ms += stage["info"]["executorRunTime"]
                cpu_ns += stage["info"]["executorCpuTime"]
                stages += 1
        return Cost(run_ms / 1e3, cpu_ns / 1e9, len(jobs), stages)


_stores: weakref.WeakKeyDictionary[SparkContext, _Store] = weakref.WeakKeyDictionary()
_stores_lock = threading.Lock()


def _store(sc: SparkContext) -> _Store:
    with _stores_lock:
        store = _stores.get(sc)
        if store is None:
            store = _stores[sc] = _Store(sc)
        return store


class Meter:
    """The cost of one job group's Spark work since the meter began."""

    def __init__(self, sc: SparkContext, group: str, since_ms: int) -> None:
        self.sc, self.group, self.since_ms = sc, group, since_ms

    def cost(self) -> Cost | None:
        """Executor and CPU seconds of the group's jobs so far (None, logged, when Spark's
        status store cannot be read: a cost never fails a run). A few py4j calls, 2-15 ms for
        a batch's 40 jobs; the first call in a process about 0.5 s more (Jackson's set-up)."""
        try:
            return _store(self.sc).cost(self.group, self.since_ms)
        except Exception:
            log.warning("could not read the cost of Spark job group %s", self.group,
                        exc_info=True)
            return None


@contextmanager
def metered(spark: SparkSession, group: str, description: str | None = None) -> Iterator[Meter]:
    """Put the Spark jobs this thread submits in the block in job group ``group`` (with
    ``description``, as ``SparkContext.setJobGroup`` does, never interrupting tasks on
    cancel); the thread's group and description before are restored when the block ends."""
    sc = spark.sparkContext
    keys = (GROUP, INTERRUPT) + ((DESCRIPTION,) if description is not None else ())
    before = {key: sc.getLocalProperty(key) for key in keys}
    meter = Meter(sc, group, int(time.time() * 1000))
    _set(sc, GROUP, group)
    _set(sc, INTERRUPT, "false")
    if description is not None:
        _set(sc, DESCRIPTION, description)
    try:
        yield meter
    finally:
        for key, value in before.items():
            _set(sc, key, value)


def _set(sc: SparkContext, key: str, value: str | None) -> None:
    """A local property of the calling thread; None removes it (SparkContext's own rule)."""
    sc._jsc.setLocalProperty(key, value)
