"""The files source without Spark: config, discovery, readiness, selection, state, leases and
the reader, on real files in a temporary landing dir."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from python_ingest.changelog.schema import ChangelogSchema
from python_ingest.config import JobConfig, parse_job
from python_ingest.config.files import FILES_MAX_BYTES, FileSourceConfig
from python_ingest.demo.files import trip_records, write_demo_partitions, write_file
from python_ingest.exceptions import ConfigError
from python_ingest.sources.files.leases import PartitionLeases, commit_lock
from python_ingest.sources.files.partitions import discover, newest_arrival, select
from python_ingest.sources.files.reader import FileReader
from python_ingest.tables.checkpoints import Checkpoint, ProcessedPartitions
from tests.conftest import REPO

pytestmark = pytest.mark.files

SCHEMA = json.loads((REPO / "schemas" / "trips.avsc").read_text())


def files_job(path: Path, **extra: Any) -> JobConfig:
    return parse_job("trips_files", {"source": "files", "path": str(path),
                                     "schema": "schemas/trips.avsc", "row_key": "trip_id",
                                     **extra}, REPO)


def age(path: Path, seconds: float) -> None:
    """Set mtimes of ``path`` and everything in it ``seconds`` into the past."""
    then = time.time() - seconds
    for p in [path, *path.rglob("*")]:
        os.utime(p, (then, then))


# -- config -------------------------------------------------------------------------------

def test_config_defaults_and_errors_name_the_field(tmp_path: Path) -> None:
    job = files_job(tmp_path)
    assert job.source == "files" and job.topic == ""
    assert job.files == FileSourceConfig(str(tmp_path))
    assert job.max_bytes == FILES_MAX_BYTES < JobConfig.max_bytes  # read on the driver
    relative = parse_job("j", {"source": "files", "path": "landing/x", "row_key": "trip_id",
                               "schema": str(REPO / "schemas/trips.avsc"), "settle_seconds": 0,
                               "max_partitions": 3}, tmp_path)
    assert relative.files is not None
    assert relative.files.path == str(tmp_path / "landing/x")
    assert (relative.files.settle_seconds, relative.files.max_partitions) == (0.0, 3)
    cases = [({"path": None}, "jobs.j.path"),
             ({"settle_seconds": -1}, "jobs.j.settle_seconds"),
             ({"lease_timeout": 0}, "jobs.j.lease_timeout"),
             ({"max_partitions": 0}, "jobs.j.max_partitions"),
             ({"source": "ftp"}, "jobs.j.source")]
    for extra, field in cases:
        raw = {"source": "files", "path": str(tmp_path), "row_key": "trip_id",
               "schema": "schemas/trips.avsc", **extra}
        with pytest.raises(ConfigError) as error:
            parse_job("j", {k: v for k, v in raw.items() if v is not None}, REPO)
        assert error.value.field == field
    with pytest.raises(ConfigError, match="source: files") as error:
        parse_job("j", {"topic": "t", "path": "x", "row_key": "trip_id",
                        "schema": "schemas/trips.avsc"}, REPO)
    assert error.value.field == "jobs.j.path"
    with pytest.raises(ConfigError) as error:  # a Kafka job still needs its topic
        parse_job("j", {"row_key": "trip_id", "schema": "schemas/trips.avsc"}, REPO)
    assert error.value.field == "jobs.j.topic"


# -- discovery, readiness, selection ------------------------------------------------------

def test_discovers_partitions_in_key_order_and_ignores_markers_and_temporaries(
        tmp_path: Path) -> None:
    landing = write_demo_partitions(tmp_path, hours=3, rows_per_file=2)
    (landing / "dt=2026-11-23/hour=05/.part-1.json.crc").write_text("x")
    (landing / "dt=2026-11-23/hour=06/_temporary").mkdir()
    (landing / "dt=2026-11-23/hour=06/_temporary/part-9.json").write_text("{}\n")
    (landing / "dt=2026-11-23/hour=07/notes.txt").write_text("not data")
    found = discover(landing)
    assert [p.key for p in found] == ["dt=2026-11-23/hour=05", "dt=2026-11-23/hour=06",
                                      "dt=2026-11-23/hour=07"]
    assert [[Path(f.path).name for f in p.files] for p in found] == [
        ["part-00000.avro"], ["part-00000.json"], ["part-00000.csv"]]
    assert all(p.has_success for p in found)
    assert discover(tmp_path / "absent") == []


def test_a_growing_partition_is_ready_only_once_settled_or_marked(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    part = landing / "dt=2026-11-23" / "hour=07" / "part-0.json"
    write_file(part, trip_records(1, 5, 1), SCHEMA)
    config = FileSourceConfig(str(landing), settle_seconds=30)
    [partition] = discover(landing)
    assert not partition.ready(30)  # just written
    age(landing, 60)
    [partition] = discover(landing)
    assert partition.ready(30)
    with open(part, "a") as out:  # the copy goes on: the partition is not complete
        out.write(json.dumps(trip_records(6, 1, 6)[0]) + "\n")
    [partition] = discover(landing)
    assert not partition.ready(30)
    assert select([partition], ProcessedPartitions(), config, 10**9).take == ()
    (part.parent / "_SUCCESS").touch()  # the writer says it is done: ready at once
    [partition] = discover(landing)
    assert partition.ready(30)
    assert [p.key for p in select([partition], ProcessedPartitions(), config, 10**9).take] \
        == ["dt=2026-11-23/hour=07"]


def test_selection_takes_oldest_first_within_the_caps(tmp_path: Path) -> None:
    landing = write_demo_partitions(tmp_path, hours=4, rows_per_file=3)
    found = discover(landing)
    keys = [p.key for p in found]
    done = ProcessedPartitions().adding([keys[1]], time.time())
    two = select(found, done, FileSourceConfig(str(landing), max_partitions=2), 10**9)
    assert [p.key for p in two.take] == [keys[0], keys[2]]
    assert two.left == (keys[3],)
    one_file = select(found, done, FileSourceConfig(str(landing)), found[0].bytes)
    assert [p.key for p in one_file.take] == [keys[0]]  # max_bytes: the first always fits
    busy = select(found, done, FileSourceConfig(str(landing)), 10**9, busy=[keys[0]])
    assert [p.key for p in busy.take] == [keys[2], keys[3]]


def test_processed_partitions_compact_into_a_watermark_and_round_trip() -> None:
    now = 1_000_000.0
    day = 86_400.0
    state = ProcessedPartitions().adding(["h=05", "h=06"], now - 3 * day)
    state = state.adding(["h=08"], now - 2 * day).adding(["h=09"], now)
    compacted = state.compacted(pending=["h=07"], now=now, lateness_s=day)
    assert compacted.watermark == "h=06"  # h=07 is still pending: the watermark waits
    assert set(compacted.done) == {"h=08", "h=09"}
    assert all(k in compacted for k in ("h=05", "h=06", "h=08", "h=09"))
    assert "h=07" not in compacted and "h=10" not in compacted
    later = compacted.compacted(pending=[], now=now, lateness_s=day)
    assert later.watermark == "h=08" and set(later.done) == {"h=09"}
    checkpoint = Checkpoint("files:/x", {}, 3, files=later)
    assert Checkpoint.from_json(checkpoint.to_json()) == checkpoint
    kafka = Checkpoint("t", {0: 5}, 2)
    assert "files" not in json.loads(kafka.to_json())  # Kafka checkpoints are unchanged
    assert Checkpoint.from_json(kafka.to_json()) == kafka


def test_a_partition_arriving_below_the_watermark_is_late_and_reported_once(
        tmp_path: Path) -> None:
    """#35.3: once the watermark passed its key, a new partition is skipped as late (named in
    ``Selection.late``), never taken, and not mistaken for one the watermark covers."""
    landing = tmp_path / "landing"
    for hour in (6, 7):
        write_file(landing / f"dt=2026-11-23/hour={hour:02d}/part-0.json",
                   trip_records(hour * 10, 2, hour * 10), SCHEMA)
    config = FileSourceConfig(str(landing), settle_seconds=0, lateness_seconds=0)
    listed = discover(landing)
    state = ProcessedPartitions().adding([p.key for p in listed], time.time())
    state = state.compacted([], time.time(), 0, newest_arrival(listed))
    assert state.watermark == "dt=2026-11-23/hour=07" and state.done == {}
    time.sleep(0.05)  # a clock tick of the file system later
    write_file(landing / "dt=2026-11-23/hour=05/part-0.json", trip_records(50, 2, 50), SCHEMA)
    write_file(landing / "dt=2026-11-23/hour=08/part-0.json", trip_records(80, 2, 80), SCHEMA)
    chosen = select(discover(landing), state, config, 10**9)
    assert [p.key for p in chosen.take] == ["dt=2026-11-23/hour=08"]
    assert chosen.late == ("dt=2026-11-23/hour=05",)  # not 06 or 07: they were seen
    recorded = state.with_late(chosen.late)
    assert select(discover(landing), recorded, config, 10**9).late == ()  # reported once
    assert ProcessedPartitions.from_dict(recorded.to_dict()) == recorded
    legacy = ProcessedPartitions.from_dict({"watermark": state.watermark, "done": {}})
    assert legacy.seen_until is None and select(discover(landing), legacy, config,
                                                10**9).late == ()  # unknown: nothing claimed
    # a commit that does not move the watermark keeps the newest listing's arrivals
    kept = recorded.compacted(["dt=2026-11-23/hour=08"], time.time(), 0,
                              newest_arrival(discover(landing)))
    assert kept.watermark == state.watermark and kept.late == recorded.late
    assert kept.seen_until is not None and kept.seen_until > (state.seen_until or 0)


# -- leases --------------------------------------------------------------------------------

def test_a_partition_lease_is_held_until_released_or_expired(tmp_path: Path) -> None:
    first = PartitionLeases(tmp_path, "run-a", timeout_s=600)
    second = PartitionLeases(tmp_path, "run-b", timeout_s=600)
    assert first.take("dt=1/hour=05")
    assert not second.take("dt=1/hour=05")
    assert second.busy() == {"dt=1/hour=05"} and first.busy() == set()
    first.release()
    assert second.take("dt=1/hour=05")
    # run-b dies holding it; after the timeout a third run retakes it, exactly one of many
    lease = next(tmp_path.glob("*.lease"))
    holder = json.loads(lease.read_text())
    lease.write_text(json.dumps({**holder, "taken_at": time.time() - 601}))
    racers = [PartitionLeases(tmp_path, f"run-{i}", timeout_s=600) for i in range(8)]
    won: list[str] = []
    barrier = threading.Barrier(len(racers))

    def race(leases: PartitionLeases) -> None:
        barrier.wait()
        if leases.take("dt=1/hour=05"):
            won.append(leases.run_id)

    threads = [threading.Thread(target=race, args=(r,)) for r in racers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    assert json.loads(lease.read_text())["run"] == won[0]


def test_the_commit_lock_excludes_other_holders(tmp_path: Path) -> None:
    inside: list[int] = []
    overlaps: list[int] = []

    def commit(n: int) -> None:
        with commit_lock(tmp_path):
            if inside:
                overlaps.append(n)
            inside.append(n)
            time.sleep(0.02)
            inside.remove(n)

    threads = [threading.Thread(target=commit, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == []


# -- reader --------------------------------------------------------------------------------

@pytest.mark.parametrize("suffix", [".avro", ".json", ".csv", ".parquet"])
def test_every_format_reads_to_the_same_changelog_rows(tmp_path: Path, suffix: str) -> None:
    job = files_job(tmp_path)
    reader = FileReader(ChangelogSchema.load(job, REPO))
    records = trip_records(1, 4, 10)
    records[1]["_changed_columns"] = ["status", "fare"]
    records[2]["fare"] = None
    path = write_file(tmp_path / f"dt=1/part-0{suffix}", records, SCHEMA)
    [partition] = discover(tmp_path)
    parsed = reader.read(partition.files[0])
    assert (parsed.read, parsed.errors, parsed.offsets) == (4, [], [0, 1, 2, 3])
    assert parsed.changelog is not None
    rows = parsed.changelog.to_pylist()
    assert [r["_row_key"] for r in rows] == ["1", "2", "3", "4"]
    assert [r["_ref_key"] for r in rows] == [10, 11, 12, 13]
    assert rows[1]["_changed_columns"] == ["status", "fare"] and rows[2]["fare"] is None
    assert rows[0]["requested_at"].timestamp() * 1000 == records[0]["requested_at"]
    assert rows[0]["_event_ts"].timestamp() * 1000 == records[0]["_event_ts"]
    assert path.is_file()


def test_a_broken_file_or_record_becomes_error_rows_naming_why(tmp_path: Path) -> None:
    reader = FileReader(ChangelogSchema.load(files_job(tmp_path), REPO))
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "a.avro").write_bytes(b"not an avro container")
    (tmp_path / "p" / "b.json").write_text('{"trip_id": 1, "_ref_key": 1}\n{oops\n')
    records = trip_records(1, 3, 1)
    records[1]["trip_id"] = None  # no row key: that record only
    records[2]["fare"] = "not a number"
    write_file(tmp_path / "p" / "c.json", records, SCHEMA)
    a, b, c = (reader.read(f) for f in discover(tmp_path)[0].files)
    assert a.read == 1 and a.changelog is None and a.errors[0][0] is None
    assert "cannot parse as avro" in a.errors[0][1]
    assert b.read == 1 and "line 2 is not JSON" in b.errors[0][1]
    assert c.read == 3 and c.offsets == [0]
    assert [(o, "row key column 'trip_id' is null" in r or "'fare'" in r)
            for o, r, _ in c.errors] == [(1, True), (2, True)]
    assert json.loads(c.errors[0][2] or b"{}")["_ref_key"] == 2


# -- runner --------------------------------------------------------------------------------

def test_runner_sees_a_files_job_backlog_as_its_ready_unprocessed_partitions(
        tmp_path: Path) -> None:
    from python_ingest.runner.scheduler import JobSlot, _files_backlog

    landing = write_demo_partitions(tmp_path, hours=3, rows_per_file=1)
    write_file(landing / "dt=2026-11-23" / "hour=09" / "part-0.json", trip_records(1, 1, 1),
               SCHEMA)  # just written, no marker: settling
    slot = JobSlot(files_job(landing))
    assert _files_backlog(slot) is None and slot.due(0.0)  # never ran here: due anyway
    slot.checkpoint = {"offsets": {}}
    assert _files_backlog(slot) == 3
    first = ProcessedPartitions().adding(["dt=2026-11-23/hour=05"], time.time())
    slot.checkpoint = {"offsets": {}, "files": first.to_dict()}
    assert _files_backlog(slot) == 2
    everything = first.adding([p.key for p in discover(landing)][:3], time.time())
    slot.checkpoint = {"offsets": {}, "files": everything.to_dict()}
    slot.backlog = _files_backlog(slot)
    assert slot.backlog == 0 and not slot.due(0.0)


def test_runner_poll_asks_the_broker_for_kafka_jobs_only(tmp_path: Path) -> None:
    import yaml

    from python_ingest.config import load_settings
    from python_ingest.runner.scheduler import Runner

    landing = write_demo_partitions(tmp_path, hours=2, rows_per_file=1)
    config = tmp_path / "sluice.yml"
    config.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "state"), "jobs": {
        "k": {"topic": "t.k", "schema": str(REPO / "schemas/trips.avsc"),
              "row_key": "trip_id"},
        "f": {"source": "files", "path": str(landing),
              "schema": str(REPO / "schemas/trips.avsc"), "row_key": "trip_id"}}}))
    settings = load_settings(config, env={})

    class Ends:  # ClusterEnds' interface: {job: (servers, topic)} -> {job: ends}
        asked: list[set[str]] = []

        def end(self, wanted: dict[str, tuple[str, str]],
                problems: list[str] | None = None) -> dict[str, dict[int, int]]:
            self.asked.append({topic for _servers, topic in wanted.values()})
            return {job: {0: 10, 1: 4} for job, (_s, topic) in wanted.items() if topic == "t.k"}

    runner = Runner(None, settings, ["f", "k"], dbt=object())  # type: ignore[arg-type]
    for slot in runner.slots.values():
        slot.checkpoint = {"offsets": {"0": 6}}
    ends = Ends()
    runner._poll(ends)  # type: ignore[arg-type]
    assert ends.asked == [{"t.k"}]
    assert (runner.slots["k"].backlog, runner.slots["f"].backlog) == (8, 2)


def test_status_shows_a_files_job_backlog_without_a_broker(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    import yaml

    from python_ingest.cli.runner import cmd_status
    from python_ingest.config import load_settings
    from python_ingest.tables.status import StatusFile

    landing = write_demo_partitions(tmp_path, hours=3, rows_per_file=1)
    config = tmp_path / "sluice.yml"
    config.write_text(yaml.safe_dump({
        "state_dir": str(tmp_path / "state"),
        "broker": {"bootstrap_servers": "127.0.0.1:9", "embedded": False},  # nothing there
        "jobs": {"f": {"source": "files", "path": str(landing), "row_key": "trip_id",
                       "schema": str(REPO / "schemas/trips.avsc")}}}))
    settings = load_settings(config, env={})
    args = argparse.Namespace(history=False, job=None, json=True)

    assert cmd_status(args, settings) == 0
    shown = json.loads(capsys.readouterr().out)
    assert "broker_error" not in shown and shown["jobs"]["f"]["backlog"] == 3
    processed = ProcessedPartitions().adding(["dt=2026-11-23/hour=05"], time.time())
    StatusFile(tmp_path / "state").update_job(
        "f", checkpoint=json.loads(Checkpoint("", {}, 1, files=processed).to_json()))
    assert cmd_status(args, settings) == 0
    assert json.loads(capsys.readouterr().out)["jobs"]["f"]["backlog"] == 2
