"""#58.1 through a job's read (Spark, the broker): a Debezium PostgreSQL change written more
than 64 MiB of WAL before the commit streamed before its transaction's takes its own LSN, and
the batch stops only where a snapshot read of an incremental or blocking snapshot, streamed
while its transaction was open, would outrank it. The events are the real connector's
(captured in cases/, pg_cases.py) with their positions moved: an incremental snapshot beside
a transaction writing that much WAL is not produced here. The read may be in an earlier batch
(the driver finds its bound in the raw table, as a new process does), in the same work unit,
or in an earlier work unit of the same partition (the task reads those messages again).
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from python_ingest.exceptions import ReadError
from python_ingest.kafka import broker as broker_mod
from tests.sources.debezium import pg_cases

pytestmark = [pytest.mark.debezium, pytest.mark.reliability, pytest.mark.e2e]

MIB = 1 << 20
LAST = 40 << 30  # the commit streamed before the long transaction's
FAR = LAST - 200 * MIB  # the long transaction's change, far before LAST
HAZARD = "snapshot read .* was streamed while its transaction was open"


def _event(op: str, row_id: int, value: str, lsn: int, last: int) -> bytes:
    """A captured ``orders`` message of Debezium's with its op, row and position replaced."""
    messages, _ = pg_cases.load()
    template = next(json.loads(m) for m in messages["orders"]
                    if json.loads(m)["payload"]["op"] == "u")
    event = copy.deepcopy(template)
    payload = event["payload"]
    payload["op"] = op
    payload["before"] = None
    payload["after"] = {"id": row_id, "v": value}
    payload["source"]["lsn"] = lsn
    payload["source"]["sequence"] = json.dumps([str(last), str(lsn)])
    payload["source"]["snapshot"] = "incremental" if op == "r" else "false"
    return json.dumps(event).encode()


def _job(spark: Any, broker: str, workdir: Path, tmp_path: Path, name: str,
         events: list[tuple[int, bytes]]) -> tuple[Any, Any]:
    from python_ingest.config import load_settings
    from python_ingest.scaffold.debezium import scaffold
    from tests.conftest import write_config

    topic = f"pgbounds.public.{name}"
    broker_mod.ensure_topic(broker, topic, 1)
    _produce(broker, topic, events)
    config = write_config(tmp_path / "sluice.yml", workdir, broker, {})
    result = scaffold(load_settings(config, env={}), [topic], tmp_path, config,
                      value_format="json", say=None, job_prefix="pgb_")
    settings = load_settings(config, env={})
    return settings, settings.job(result.jobs_added[0])


def _produce(broker: str, topic: str, events: list[tuple[int, bytes]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker})
    for key, value in events:
        producer.produce(topic, key=json.dumps({"id": key}).encode(), value=value)
    assert producer.flush(30) == 0


def _raw(spark: Any, job: Any) -> list[tuple[int, str, int]]:
    from python_ingest.tables.names import JobTables

    return sorted((r["id"], r["v"], r["_ref_key"])
                  for r in spark.table(JobTables(job.name).raw).collect())


def test_far_change_after_an_earlier_batchs_read_stops_and_one_after_its_commit_lands(
        spark: Any, broker: str, workdir: Path, tmp_path: Path, job_name: str) -> None:
    """Batch 1 lands an incremental snapshot's read of row 1 at a commit after the far
    change. In a new process (no bounds in memory) a far change of row 2, written after that
    read's commit, lands with its own LSN's key: the driver found the read's bound in the raw
    table. Row 1's far change, open at the read, stops its batch, nothing committed, with
    the bound kept in memory and with it found again."""
    from python_ingest.sources.debezium import read_bounds
    from python_ingest.steps.jobs import run_ingest
    from python_ingest.tables.checkpoints import read_checkpoint
    from python_ingest.tables.names import JobTables

    read_at = FAR + 10 * MIB
    settings, job = _job(spark, broker, workdir, tmp_path, job_name, [
        (1, _event("r", 1, "read while open", read_at + 64, read_at))])
    first = run_ingest(spark, settings, job)
    assert (first.read, first.landed, first.errors) == (1, 1, 0)
    read_bounds._known.clear()  # a new process: the bound is found in the raw table
    late = LAST + 300 * MIB  # row 2's transaction: begun after the read's commit
    _produce(broker, job.topic, [(2, _event("u", 2, "far, begun after the read",
                                            read_at + 4 * MIB, late))])
    second = run_ingest(spark, settings, job)
    assert (second.read, second.landed, second.errors) == (1, 1, 0)
    keys = {v: key for _, v, key in _raw(spark, job)}
    assert keys["far, begun after the read"] == (((read_at + 4 * MIB) // 16 + 1) << 22) | 1

    _produce(broker, job.topic, [(1, _event("u", 1, "far, open at the read", FAR, LAST))])
    for fresh in (False, True):  # the bound this process kept, then found again
        if fresh:
            read_bounds._known.clear()
        with pytest.raises(ReadError, match=HAZARD):
            run_ingest(spark, settings, job)
        assert read_checkpoint(spark, JobTables(job.name).raw).batch_id == 2  # not committed
    assert "far, open at the read" not in {v for _, v, _ in _raw(spark, job)}


def test_far_change_after_a_read_in_its_unit_or_an_earlier_unit_stops(
        spark: Any, broker: str, workdir: Path, tmp_path: Path, job_name: str) -> None:
    """The read and the far change in one batch: in one work unit, then (one message per
    task) in two, where the later task reads the earlier one's messages again. Without the
    read the far change lands, keyed by its own LSN, above the row's earlier changes."""
    from python_ingest.steps.jobs import run_ingest

    read_at = FAR + 10 * MIB
    events = [(1, _event("r", 1, "read while open", read_at + 64, read_at)),
              (1, _event("u", 1, "far, open at the read", FAR, LAST))]
    settings, job = _job(spark, broker, workdir, tmp_path, job_name, events)
    with pytest.raises(ReadError, match=HAZARD):
        run_ingest(spark, settings, job)
    with pytest.raises(ReadError, match=HAZARD):
        run_ingest(spark, settings, replace(job, records_per_task=1))

    (tmp_path / "other").mkdir()
    settings, other = _job(spark, broker, workdir, tmp_path / "other", f"{job_name}_b", [
        (1, _event("u", 1, "before", FAR - 4 * MIB, FAR - 5 * MIB)),
        (1, _event("u", 1, "far", FAR, LAST)),
        (1, _event("u", 1, "far, later in it", FAR + 48, LAST))])
    landed = run_ingest(spark, settings, replace(other, records_per_task=1))
    assert (landed.read, landed.landed, landed.errors) == (3, 3, 0)
    keys = {v: key for _, v, key in _raw(spark, other)}
    assert keys["far"] == ((FAR // 16 + 1) << 22) | 1
    assert keys["before"] < keys["far"] < keys["far, later in it"]
