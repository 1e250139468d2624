"""Error replay (issue #13.3): error rows listed by reason with their lineage; chosen ones,
once fixed, go back through staging, the fork and the merge; a replay is idempotent, never
lets an old row overwrite a newer one, and marks what it resolved with its batch and run."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from python_ingest.cli import main as cli
from python_ingest.demo.trips import Event, produce
from python_ingest.exceptions import ReplayError
from python_ingest.kafka import broker as broker_mod
from python_ingest.replay.replay import Selection, replay
from python_ingest.replay.selection import by_reason, chosen, error_rows
from python_ingest.steps.pipeline import run_job
from python_ingest.tables.runs import flush_records
from tests.conftest import REPO, sluice_cmd, trips_job
from tests.steps.helpers import encode, schema

pytestmark = [pytest.mark.e2e, pytest.mark.replay]


def _record(trip_id: int, ref: int, **fields: Any) -> dict[str, Any]:
    record = {"trip_id": trip_id, "rider_id": 7, "driver_id": 3, "city": "berlin",
              "status": "requested", "fare": 10.0, "distance_km": 2.0, "requested_at": None,
              "_ref_key": ref, "_changed_columns": None, "_source": "test", "_event_ts": None,
              "_is_deleted": False, "_force_update": False, "_data_center": "dc1"}
    record.update(fields)
    return record


def _event(parsed: Any, trip_id: int, ref: int, schema_id: int | None = None,
           **fields: Any) -> Event:
    record = _record(trip_id, ref, **fields)
    value = encode(parsed, record)
    if schema_id is not None:  # Confluent wire format: magic byte 0, 4-byte schema id
        value = b"\x00" + schema_id.to_bytes(4, "big") + value
    return Event(str(trip_id).encode(), value, "test", record)


def _lake(spark: Any, table: str) -> dict[int, tuple[str, float, int]]:
    return {r[0]: (r[1], float(r[2]), r[3]) for r in spark.sql(
        f"select trip_id, trip_status, fare_amount, _ref_key from {table}").collect()}


def test_replay_fixes_rows_resolves_them_once_and_keeps_ref_key_order(
        spark: Any, broker: str, make_settings: Any, project: Any, job_name: str,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parsed = schema()
    project(job_name)
    settings = make_settings({job_name: trips_job(job_name)})
    job = settings.job(job_name)
    broker_mod.ensure_topic(broker, job_name, 1)
    produce(broker, job_name, iter([
        _event(parsed, 1, 10),
        _event(parsed, 2, 11, fare=-3.0),                 # fails fare_amount >= 0
        _event(parsed, 3, 12, status="teleported"),      # fails trip_status in set
        _event(parsed, 3, 20, status="completed"),       # a newer version of 3: valid
        _event(parsed, 4, 13, fare=-5.0),
    ]))
    first = run_job(spark, settings, job)
    assert first.counts["expectation_errors"] == 3 and first.counts["valid"] == 2
    tables = first.tables
    assert tables is not None and tables.lake is not None
    assert _lake(spark, tables.lake) == {1: ("requested", 10.0, 10), 3: ("completed", 10.0, 20)}

    # the listing: by reason, with lineage (batch, partition, offset) on every row
    rows = error_rows(spark, job_name)
    assert rows is not None
    listed = rows.collect()
    assert {(r["step"], r["batch_id"], r["partition"]) for r in listed} == {("fork", 1, 0)}
    assert sorted(r["offset"] for r in listed) == [1, 2, 4]
    counts = by_reason(chosen(rows, include_resolved=True))
    assert sum(c.unresolved for c in counts) == 3 and all(c.resolved == 0 for c in counts)
    assert cli.main(["--config", str(tmp_path / "sluice.yml"), "errors", job_name]) == 0
    out = capsys.readouterr().out
    assert "3 unresolved error rows, 0 resolved" in out and "fare_amount" in out

    # a bad --set fails before anything moves
    with pytest.raises(ReplayError, match="row key"):
        replay(spark, settings, job, Selection(sets=("trip_id = 9",)))
    # the owner fixes the rows: negative fares were sign errors
    fixed = replay(spark, settings, job, Selection(reason="fare_amount",
                                                  sets=("fare = abs(fare)",)))
    assert (fixed.selected, fixed.replayed, fixed.still_failing) == (2, 2, 0)
    assert fixed.run is not None and fixed.run.batch_id == 2
    assert fixed.run.counts["valid"] == 2 and fixed.run.counts["inserted"] == 2
    lake = _lake(spark, tables.lake)
    assert lake[2] == ("requested", 3.0, 11) and lake[4] == ("requested", 5.0, 13)

    # an old row replayed never overwrites the newer version the lake holds
    old = replay(spark, settings, job, Selection(where="row_key = '3'",
                                                sets=("status = 'cancelled'",)))
    assert old.replayed == 1 and old.run is not None and old.run.counts["valid"] == 1
    assert _lake(spark, tables.lake)[3] == ("completed", 10.0, 20)

    # every error row resolved, each by the batch (and run) that replayed it; again: nothing
    resolved = {r["error_id"]: r["resolved_in_batch"] for r in error_rows(spark, job_name)
                .collect()}
    assert resolved == {"fork:1:0:1": 2, "fork:1:0:4": 2, "fork:1:0:2": 3}
    _listed_alike_without_a_jvm(spark, settings, job_name, ("", "fare_amount", "NO SUCH"))
    raw_before = spark.table(tables.raw).count()
    lake_before = _lake(spark, tables.lake)
    again = replay(spark, settings, job, Selection())
    assert (again.selected, again.run) == (0, None)
    assert spark.table(tables.raw).count() == raw_before == 5 + 3
    assert _lake(spark, tables.lake) == lake_before
    flush_records()  # the records this process holds (tests/conftest.py)
    run = spark.sql(f"select batch_id, details from meta.runs where run_id = "
                    f"'{fixed.run.run_id}'").collect()[0]
    assert run["batch_id"] == 2
    details = json.loads(run["details"])
    assert details["steps"][0] == "replay" and details["replay"]["set"] == {"fare": "abs(fare)"}
    # the job's next ordinary run goes on from the same Kafka offsets: nothing read twice
    produce(broker, job_name, iter([_event(parsed, 5, 30)]))
    after = run_job(spark, settings, job)
    assert after.counts["read"] == 1 and after.batch_id == 4
    assert set(_lake(spark, tables.lake)) == {1, 2, 3, 4, 5}


def _listed_alike_without_a_jvm(spark: Any, settings: Any, job: str,
                                reasons: tuple[str, ...]) -> None:
    """``sluice errors JOB``'s counts read by hudi-rs or pyiceberg (tables/native.py) are
    Spark's, resolved ones included, for each --reason."""
    from python_ingest.replay.selection import native_counts
    from python_ingest.tables.native import NativeLake

    lake = NativeLake.of(settings, settings.job(job))
    for reason in reasons:
        rows = error_rows(spark, job)
        assert rows is not None
        through_spark = by_reason(chosen(rows, reason or None, include_resolved=True))
        assert native_counts(lake, job, reason or None) == through_spark, reason
        assert through_spark or reason == "NO SUCH"


def test_replay_decodes_messages_once_their_schema_is_registered(
        spark: Any, broker: str, make_settings: Any, project: Any, job_name: str,
        tmp_path: Path) -> None:
    parsed = schema()
    project(job_name)
    registry = tmp_path / "registry"
    registry.mkdir()
    shutil.copy(REPO / "schemas" / "trips.avsc", registry / "1.avsc")
    settings = make_settings({job_name: trips_job(
        job_name, value_format="confluent-avro", schema_registry=str(registry))})
    job = settings.job(job_name)
    broker_mod.ensure_topic(broker, job_name, 1)
    produce(broker, job_name, iter([_event(parsed, 1, 10, schema_id=1),
                                    _event(parsed, 2, 11, schema_id=2),
                                    _event(parsed, 3, 12, schema_id=2)]))
    first = run_job(spark, settings, job)
    assert first.counts["decode_errors"] == 2 and first.counts["landed"] == 1
    rows = error_rows(spark, job_name)
    assert rows is not None
    assert {(r["step"], r["offset"]) for r in rows.collect()} == {("decode", 1), ("decode", 2)}

    # not registered yet: nothing decodes, nothing is marked, the run says why
    with pytest.raises(ReplayError, match="still fail to decode"):
        replay(spark, settings, job, Selection())
    shutil.copy(REPO / "schemas" / "trips.avsc", registry / "2.avsc")  # the owner registers it
    done = replay(spark, settings, job, Selection(reason="unknown schema id"))
    assert (done.selected, done.replayed, done.still_failing) == (2, 2, 0)
    tables = first.tables
    assert tables is not None and tables.lake is not None
    assert set(_lake(spark, tables.lake)) == {1, 2, 3}
    raw = {r["_replay_of"]: r["_batch_id"] for r in spark.table(tables.raw).collect()}
    assert raw == {None: 1, "decode:1:0:1": 2, "decode:1:0:2": 2}
    _listed_alike_without_a_jvm(spark, settings, job_name, ("", "unknown schema"))
    assert replay(spark, settings, job, Selection()).selected == 0


@pytest.mark.reliability
def test_replay_killed_around_its_commit_resolves_nothing_or_everything(
        spark: Any, broker: str, make_settings: Any, project: Any, job_name: str,
        tmp_path: Path) -> None:
    """SIGKILL just before the replay's raw commit: nothing resolved, nothing landed; just
    after it: resolved, and the next ordinary run merges what the replay landed; either way a
    later replay adds nothing and every row reaches the lake once."""
    parsed = schema()
    project(job_name)
    settings = make_settings({job_name: trips_job(job_name)})
    job = settings.job(job_name)
    broker_mod.ensure_topic(broker, job_name, 1)
    produce(broker, job_name, iter([_event(parsed, 1, 10, fare=-1.0),
                                    _event(parsed, 2, 11, fare=-2.0)]))
    first = run_job(spark, settings, job)
    tables = first.tables
    assert tables is not None and tables.lake is not None
    assert first.counts["expectation_errors"] == 2
    config = tmp_path / "sluice.yml"
    command = ("errors", "replay", job_name, "--set", "fare = abs(fare)")

    killed = sluice_cmd(config, *command, env={"SLUICE_FAULT": "before_replay_commit"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert spark.table(tables.raw).count() == 2
    rows = error_rows(spark, job_name)
    assert rows is not None and chosen(rows).count() == 2

    killed = sluice_cmd(config, *command, env={"SLUICE_FAULT": "after_replay_commit"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert spark.table(tables.raw).where("_replay_of is not null").count() == 2
    assert chosen(error_rows(spark, job_name)).count() == 0  # resolved with the raw commit
    assert spark.table(tables.lake).count() == 0  # no row of the job was ever valid

    after = run_job(spark, settings, job)  # the job's next run catches up on batch 2
    assert after.counts["read"] == 0 and after.counts["inserted"] == 2
    assert _lake(spark, tables.lake) == {1: ("requested", 1.0, 10), 2: ("requested", 2.0, 11)}
    assert replay(spark, settings, job, Selection(sets=("fare = abs(fare)",))).selected == 0
    assert spark.table(tables.raw).count() == 4
