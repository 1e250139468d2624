"""Running jobs as recorded runs, and reporting where each job stands."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from python_ingest.config import JobConfig, Settings
from python_ingest.exceptions import SluiceError
from python_ingest.kafka import client as kafka_client
from python_ingest.steps.ingest.land import IngestResult, ingest
from python_ingest.tables.checkpoints import read_checkpoint
from python_ingest.tables.formats import refresh_schemas
from python_ingest.tables.lease import job_lease
from python_ingest.tables.names import JobTables
from python_ingest.tables.runs import Run, last_runs

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def run_ingest(spark: SparkSession, settings: Settings, job: JobConfig,
               accept_data_loss: bool = False) -> IngestResult:
    """One recorded ingestion run of ``job``: succeeded, up-to-date or failed (and re-raised)."""
    run = Run(job=job.name)
    run.details["steps"] = ["ingest"]
    try:
        with job_lease(spark, job.name) as lease:  # one run of a job at a time (lease.py)
            if not lease.untouched:  # another process ran it since: its raw table may differ
                refresh_schemas(spark, [JobTables(job.name).raw])
            result = ingest(spark, settings, job, run, accept_data_loss)
    except Exception as exc:
        run.finish(spark, "failed", f"{type(exc).__name__}: {exc}")
        if not isinstance(exc, SluiceError):
            log.exception("job %s failed", job.name)
        raise
    run.finish(spark, "up-to-date" if result.up_to_date else "succeeded")
    return result


def job_status(spark: SparkSession, settings: Settings, job: JobConfig,
               runs: int = 5) -> dict[str, Any]:
    """Checkpoint, end offset and lag per partition, plus the last runs."""
    checkpoint = read_checkpoint(spark, JobTables(job.name).raw)
    status: dict[str, Any] = {"job": job.name, "topic": job.topic,
                              "batch_id": checkpoint.batch_id if checkpoint else None,
                              "partitions": [], "lag": None,
                              "runs": last_runs(spark, job.name, runs)}
    if job.files is not None:  # a files job: where it stands is its processed partitions
        status["files"] = checkpoint.files.to_dict() if checkpoint and checkpoint.files else None
        return status
    try:
        offsets = kafka_client.partition_offsets(settings.kafka_for(job), job.topic)
    except SluiceError as exc:
        status["broker_error"] = str(exc)
        offsets = []
    total = 0
    for po in offsets:
        at = checkpoint.offsets.get(po.partition) if checkpoint else None
        start = at if at is not None else (po.earliest if job.starting_offsets == "earliest"
                                           else po.end)
        lag = max(0, po.end - start)
        total += lag
        status["partitions"].append({"partition": po.partition, "checkpoint": at,
                                     "earliest": po.earliest, "end": po.end, "lag": lag})
    status["lag"] = total if offsets else None
    return status
