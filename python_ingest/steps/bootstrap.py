"""``sluice bootstrap SOURCE DB.TABLE --direct`` (issue #62): a table's first load straight into
its job's lake, at bulk speed, exactly handed over to the tap.

    prepare       the table checked and registered, the tap's checkpoint store locked, P0
                  noted (sources/binlog/bootstrap.py, as the Kafka road)
    plan          key-ordered chunks (a first one of SEED_ROWS rows), kept with P0 in
                  <state_dir>/bootstrap/<job>.json until the bootstrap is done
    lake          a job on the batch path without a lake: the lake created empty, as its
                  first run would (steps/batch.py create_lake)
    seed          a job on the step tables' path without a lake: its first chunk lands as a
                  raw batch and takes the normal road (steps/pipeline.py run_job), which
                  creates the job's tables
    waves         the other chunks, WAVE chunks at a time, read in parallel by Spark tasks
                  (sources/binlog/bulk_read.py), each in its own consistent snapshot at its
                  exact binlog position; a wave's raw rows land as one raw batch whose commit
                  names the wave's chunks (CHUNKS_PROPERTY): landed together or not at all
    finish        the landed batches converted, forked and written in bulk (steps/bulk.py)
    hand over     the tap's checkpoint to P0 when it was further on

Resume: the job's lease is held throughout. A bootstrap killed at any point is run again
with the same command: the plan file gives the same chunks and P0, the raw commits say which
chunks landed (none lost, none landed twice), and each of finish's steps skips what its
checkpoint says is committed.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import pickle
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from python_ingest.changelog.schema import JSON_KEYS, RAW_ERROR_COLUMNS, ChangelogSchema
from python_ingest.config import JobConfig, Settings, SourceConfig
from python_ingest.exceptions import SluiceError
from python_ingest.runtime.catalog import drop_scratch
from python_ingest.runtime.faults import fault_point
from python_ingest.runtime.session import active, for_job
from python_ingest.sources.binlog.position import BinlogPosition
from python_ingest.sources.kafka.reader import ReadSpec
from python_ingest.sources.postgres.position import lsn_text
from python_ingest.sources.tap import kinds
from python_ingest.sources.tap.chunks import CHUNK_DDL, Chunk, Road, chunk_rows, read_chunks
from python_ingest.steps.batch import create_lake, why_not
from python_ingest.steps.bulk import finish, lake_holds_rows
from python_ingest.steps.dbt import Dbt
from python_ingest.steps.fork.split import suite_path
from python_ingest.steps.merge.index import MERGE_STEP
from python_ingest.steps.pipeline import expectation_pages, run_job
from python_ingest.tables.checkpoints import (
    Checkpoint,
    append_with_checkpoint,
    read_checkpoint,
    step_checkpoint,
)
from python_ingest.tables.formats import (
    commit_properties,
    ensure_table,
    name_tables,
    read_table,
    table_exists,
)
from python_ingest.tables.lease import check_held, job_lease
from python_ingest.tables.names import JobTables
from python_ingest.tables.runs import Run

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

PLAN_PROPERTY, CHUNKS_PROPERTY = "sluice.bootstrap.plan", "sluice.bootstrap.chunks"
SEED_ROWS = 1000  # a step-tables job's first chunk, which creates its tables by the normal road
WAVE = int(os.environ.get("SLUICE_BOOTSTRAP_WAVE", "0"))  # chunks per raw batch (0: 2 x cores)


@dataclass(frozen=True)
class Plan:
    """A direct bootstrap's chunks and hand-over position, fixed at its start."""

    id: str
    table: str
    p0: BinlogPosition | int  # a binlog position, or a PostgreSQL snapshot's LSN
    p0_gtid: str | None
    chunks: tuple[Chunk, ...]
    first: int = 0  # the first raw batch the bootstrap lands: the finish starts there

    def to_json(self) -> str:
        p0 = self.p0 if isinstance(self.p0, int) else [self.p0.file, self.p0.pos]
        return json.dumps({"id": self.id, "table": self.table, "p0": p0,
                           "p0_gtid": self.p0_gtid, "first": self.first,
                           "chunks": base64.b64encode(pickle.dumps(self.chunks)).decode()})

    @classmethod
    def from_json(cls, text: str) -> Plan:
        data = json.loads(text)
        p0 = data["p0"] if isinstance(data["p0"], int) else \
            BinlogPosition(data["p0"][0], int(data["p0"][1]))
        return cls(data["id"], data["table"], p0, data["p0_gtid"],
                   tuple(pickle.loads(base64.b64decode(data["chunks"]))),
                   int(data.get("first", 0)))


@dataclass(frozen=True)
class DirectResult:
    table: str
    job: str
    rows: int
    chunks: int
    seconds: float
    errors: int
    handover: str

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0


def plan_path(settings: Settings, job: str) -> Path:
    return settings.path(settings.state_dir) / "bootstrap" / f"{job}.json"


def _save_plan(path: Path, plan: Plan) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    scratch = path.with_suffix(".tmp")
    scratch.write_text(plan.to_json())
    with scratch.open("rb") as handle:
        os.fsync(handle.fileno())
    os.replace(scratch, path)


def job_for(settings: Settings, topic: str, qualified: str) -> JobConfig:
    """The job that ingests the table's topic (the scaffold's)."""
    for job in settings.jobs.values():
        if job.topic == topic:
            return job
    raise SluiceError(f"no job ingests {topic} ({qualified}): a direct bootstrap loads the "
                      "table's job's lake; run `sluice tap SOURCE --scaffold` first")


def one_row_per_key(shape: Any, encoding: str) -> bool:
    """Whether a bootstrap's rows have one row per ``_row_key``: the table's primary or
    unique key (NOT NULL columns), its text injective (one column, the JSON encoding, or
    integers joined); a synthetic or declared key may repeat, and the lake's write must
    combine them (steps/bulk.py)."""
    key = shape.key
    if key.kind not in ("primary", "unique") or key.synthetic:
        return False
    return len(key.columns) == 1 or encoding == JSON_KEYS \
        or all(shape.spec(c).kind in ("long", "ulong") for c in key.columns)


def start_over(spark: SparkSession, job: JobConfig, tables: JobTables, dbt: Dbt,
               progress: Callable[[str], None]) -> None:
    """``--reload``: the job's lake and the tables derived from it dropped, the lake last (a
    kill in between leaves a lake with rows: the same command starts over again). The raw
    table, its checkpoint (Kafka positions, batch ids) and the error tables stay: every change
    the job read is older than every chunk, which is read after the job's lease is taken."""
    why = why_not(spark, job, tables, dbt)
    if why is not None:
        raise SluiceError(f"--reload replaces the lake of a job on the batch path; job "
                          f"{job.name} takes the step tables' path ({why}): start it over "
                          "instead (drop its raw, staging, lake and index tables) and "
                          "bootstrap again")
    history = f"{tables.lake}__history"
    if table_exists(spark, history):
        raise SluiceError(f"--reload would cut the history of {tables.lake}: its history "
                          f"table {history} records every version so far. Drop {history} "
                          "first if a new history from the reload on is what you want")
    for table in (tables.index, tables.tombstones, tables.valid, tables.staging, tables.lake):
        if table and table_exists(spark, table):
            drop_scratch(spark, table)
    progress(f"bootstrap: {tables.lake} and its index dropped for the reload")


def landed_chunks(spark: SparkSession, raw: str, plan_id: str) -> set[int]:
    """The chunks of plan ``plan_id`` whose rows a raw commit holds."""
    done: set[int] = set()
    if not table_exists(spark, raw):
        return done
    for properties in commit_properties(spark, raw):
        if properties.get(PLAN_PROPERTY) == plan_id:
            done.update(int(i) for i in json.loads(properties[CHUNKS_PROPERTY]))
    return done


def direct_bootstrap(spark: SparkSession, settings: Settings, source: SourceConfig,
                     qualified: str, chunk_rows_: int | None = None, wave: int | None = None,
                     progress: Callable[[str], None] = print,
                     dbt: Dbt | None = None, reload: bool = False) -> DirectResult:
    """Load ``db.table`` of ``source`` straight into its job's lake, then hand over to the
    tap (the module doc). ``reload``: a lake that holds rows is replaced (``start_over``)."""
    started = time.monotonic()
    size = chunk_rows_ or source.bootstrap_chunk_rows
    on_source = replace(settings, broker=replace(settings.broker,  # the source's cluster
                                                 bootstrap_servers=settings.kafka_for(source)))
    parts: Road = kinds.direct(source)
    prepared = parts.prepare(on_source, source, qualified)
    try:
        table = prepared.table
        job = job_for(settings, table.topic, qualified)
        dbt = dbt or Dbt(settings)
        tables = JobTables(job.name, dbt.job_models(job.name))
        if tables.lake is None:
            raise SluiceError(f"job {job.name} has no lake model: nothing to bootstrap into")
        session = for_job(spark, settings, job)
        with active(session), job_lease(session, job.name):
            name_tables(session, tables.all())
            path = plan_path(settings, job.name)
            plan = Plan.from_json(path.read_text()) if path.is_file() else None
            if plan is None:
                if lake_holds_rows(session, tables):
                    if not reload:
                        raise SluiceError(
                            f"{tables.lake} holds rows: a direct bootstrap loads an empty lake. "
                            "Replace them with --reload, bootstrap through Kafka (without "
                            "--direct), or start the job over (drop its raw, staging, lake "
                            "and index tables)")
                    start_over(session, job, tables, dbt, progress)
                # a seed chunk only where the step tables' path must create the job's tables
                seed = None if table_exists(session, tables.lake) \
                    or why_not(session, job, tables, dbt) is None else min(SEED_ROWS, size)
                raw = read_checkpoint(session, tables.raw) \
                    if table_exists(session, tables.raw) else None
                plan = Plan(uuid.uuid4().hex, qualified, prepared.p0, prepared.p0_gtid,
                            tuple(parts.chunk_bounds(prepared.conn, table.shape, size, seed)),
                            (raw.batch_id if raw else 0) + 1)
                _save_plan(path, plan)
            else:
                p0 = lsn_text(plan.p0) if isinstance(plan.p0, int) else plan.p0
                progress(f"bootstrap {qualified}: resuming {plan.id[:8]} from P0 {p0}")
            prepared = replace(prepared, p0=plan.p0, p0_gtid=plan.p0_gtid)
            estimate = parts.estimate(prepared.conn, table)
            loader = _Loader(session, settings, job, tables, source, parts, prepared, plan, dbt,
                             wave or WAVE or 2 * session.sparkContext.defaultParallelism,
                             progress, estimate)
            loader.run()
        handover = prepared.hand_over()
    finally:
        prepared.close()
    path.unlink(missing_ok=True)
    seconds = time.monotonic() - started
    progress(f"bootstrap {qualified}: {loader.rows} rows in {seconds:.1f}s "
             f"({loader.rows / seconds if seconds else 0:.0f} rows/s) straight into "
             f"{tables.lake}, {loader.errors} error rows; {handover}")
    return DirectResult(qualified, job.name, loader.rows, len(plan.chunks), seconds,
                        loader.errors, handover)


class _Loader:
    """One direct bootstrap under the job's lease: seed, waves, finish."""

    def __init__(self, spark: SparkSession, settings: Settings, job: JobConfig,
                 tables: JobTables, source: SourceConfig, parts: Road, prepared: Any, plan: Plan,
                 dbt: Dbt, wave: int, progress: Callable[[str], None], estimate: int) -> None:
        self.spark, self.settings, self.job, self.tables = spark, settings, job, tables
        self.source, self.prepared, self.plan, self.dbt = source, prepared, plan, dbt
        self.parts = parts
        self.wave, self.progress, self.estimate = wave, progress, estimate
        self.rows = self.errors = 0
        self.started = time.monotonic()
        self.schema = ChangelogSchema.of(settings, job)  # after prepare registered the shape
        unfit = parts.jvm_unfit(source, prepared.table, prepared.conn)
        self.jvm = unfit is None  # chunks read in the JVM (jdbc_read.py), else in Python tasks
        progress(f"bootstrap {plan.table}: chunks read " + (
            f"by Python tasks ({unfit})" if unfit else "in the JVM (Spark JDBC)"))

    def run(self) -> None:
        spark, tables = self.spark, self.tables
        ensure_table(spark, tables.raw, self.schema.raw_columns())
        ensure_table(spark, tables.raw_errors, RAW_ERROR_COLUMNS)
        done = landed_chunks(spark, tables.raw, self.plan.id)
        left = [c for c in self.plan.chunks if c.index not in done]
        self.done = len(done)
        if not table_exists(spark, tables.lake or "") \
                and why_not(spark, self.job, tables, self.dbt) is None:
            create_lake(spark, self.dbt, tables)  # empty: the finish's bulk_insert fills it
        while not table_exists(spark, tables.lake or ""):
            if not left:  # landed before a kill, or no valid row at all: the run catches up
                self._seed(None)
                if not table_exists(spark, tables.lake or ""):
                    return  # nothing valid to load: the stream's first batch creates the lake
                break
            self._seed(left.pop(0))
        for at in range(0, len(left), self.wave):
            self._land([c.index for c in left[at:at + self.wave]])
        # raw batches landed before the plan (a reload's, or a run killed before its merge)
        # hold changes older than every chunk: the chunks' rows replace them
        first = max(step_checkpoint(spark, tables.lake or "", MERGE_STEP) + 1, self.plan.first)
        raw = read_checkpoint(spark, tables.raw)
        newest = raw.batch_id if raw else 0
        if newest >= first:
            self.progress(f"bootstrap {self.plan.table}: raw batches {first}..{newest}"
                          f" to {tables.lake} in bulk (converter, suite, index, lake)...")
            counts = finish(spark, self.dbt, self.job, tables,
                            suite_path(self.dbt.project, tables.staging_model),
                            expectation_pages(self.settings, self.job.name), first, newest,
                            self.plan.id,
                            unique_keys=one_row_per_key(self.prepared.table.shape,
                                                        self.schema.row_key_encoding))
            self.errors += counts["errors"]

    def _moved(self, batch_id: int) -> Checkpoint:
        """The raw checkpoint moved on by one batch, same Kafka positions (the stream's
        changes are read from where they were, or from the start of a topic not read yet)."""
        current = read_checkpoint(self.spark, self.tables.raw)
        if current is None:
            return Checkpoint(self.job.topic, {}, batch_id, None, {}, None,
                              self.job.row_key_encoding)
        return replace(current, batch_id=batch_id, batch_start=dict(current.offsets),
                       files=None)

    def _land(self, indices: list[int], run: Run | None = None) -> Checkpoint:
        """Read the chunks ``indices`` in Spark tasks and append their raw rows as one batch,
        whose commit names them."""
        spark, tables = self.spark, self.tables
        raw = read_checkpoint(spark, tables.raw)
        batch_id = (raw.batch_id if raw else 0) + 1
        spec = ReadSpec(self.job.reader, self.settings.kafka_for(self.job),
                        self.job.read_timeout_s, self.schema, batch_id,
                        int(datetime.now(UTC).timestamp() * 1_000_000))
        work = self.parts.work(self.prepared, self.source, spec,
                               self.settings.kafka_for(self.source))
        read_one = self.parts.read_one
        chunks = [c for c in self.plan.chunks if c.index in set(indices)]
        counted = spark.sparkContext.accumulator(0)

        def body(batches: Any) -> Any:
            for batch in read_chunks(read_one, work, batches):
                counted.add(batch.num_rows)
                yield batch

        if self.jvm:
            assert self.parts.jvm_frame is not None
            frame = self.parts.jvm_frame(spark, self.source, self.prepared, spec, chunks)
        else:
            tasks = spark.createDataFrame(spark.sparkContext.parallelize(
                chunk_rows(chunks), len(chunks)), CHUNK_DDL)
            frame = tasks.mapInArrow(body, spec.output_ddl())
        moved = self._moved(batch_id)
        marks = {PLAN_PROPERTY: self.plan.id, CHUNKS_PROPERTY: json.dumps(sorted(indices))}
        check_held(self.job.name)
        append_with_checkpoint(frame, tables.raw, moved, marks)
        fault_point("bootstrap_after_wave" if run is None else "bootstrap_after_seed")
        append_with_checkpoint(read_table(spark, tables.raw_errors).limit(0),
                               tables.raw_errors, moved)
        if run is not None:
            run.batch_id = batch_id
        self.rows += counted.value if not self.jvm else read_table(spark, tables.raw).where(
            f"_batch_id = {batch_id}").count()
        self.done += len(indices)
        self._report()
        return moved

    def _seed(self, chunk: Chunk | None) -> None:
        """The first chunk through the normal road: its run creates the job's tables (None:
        only the batches landed before)."""
        def land(run: Run) -> Checkpoint | None:
            if chunk is None \
                    or chunk.index in landed_chunks(self.spark, self.tables.raw, self.plan.id):
                return read_checkpoint(self.spark, self.tables.raw)  # landed before a kill
            return self._land([chunk.index], run)

        result = run_job(self.spark, self.settings, self.job, dbt=self.dbt,
                         land=("bootstrap", land))
        self.errors += int(result.counts.get("expectation_errors", 0))

    def _report(self) -> None:
        elapsed = time.monotonic() - self.started
        total = len(self.plan.chunks)
        rate = self.rows / elapsed if elapsed else 0.0
        left = max(self.estimate - self.rows, 0)
        eta = f"ETA {left / rate:.0f}s" if rate and self.done < total else "landed"
        self.progress(f"bootstrap {self.plan.table}: {self.done}/{total} chunks, {self.rows} "
                      f"rows landed, {rate:.0f} rows/s, {eta}"
                      + ("..." if self.done < total else ""))
