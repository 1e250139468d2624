"""#60: the warehouse on S3 (a private S3Proxy, one for the module), through Hadoop's S3A: a
Hudi job and an Iceberg job (Hadoop catalog) run by `sluice run` land equal to their sources
with no secret anywhere sluice writes; an Iceberg job whose catalog is the JDBC catalog on the
tests' PostgreSQL lands its files in the bucket, equal to its source; the job leases'
compare-and-swap is S3's conditional put, raced by two processes; a runner whose jobs always
have a backlog still hands its surplus over to a runner that joins."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from python_ingest.runtime.s3proxy import S3Server
from python_ingest.tables.formats import table_exists
from tests.cluster.jdbc import jdbc_catalog
from tests.conftest import REPO, write_config
from tests.runner.fleet import Fleet
from tests.s3.conftest import s3_config, s3_reader
from tests.steps.helpers import as_lake, lake_rows

pytestmark = [pytest.mark.e2e, pytest.mark.s3]
EVENTS = 120  # per job: enough for upserts and deletes of the same trips


def test_two_processes_racing_for_leases_on_s3_one_wins_each(
        s3: S3Server, bucket: str, workdir: Path, broker: str, tmp_path: Path) -> None:
    """Both racers take the same lease at the same moment, six times: fresh leases and
    expired ones left by another host. Exactly one wins each round (on S3A alone both would:
    its create checks, then writes, and its rename copies)."""
    config = write_config(tmp_path / "sluice.yml", workdir, broker, {},
                          catalog=s3_config(s3, f"{bucket}/race"))
    gates = tmp_path / "gates"
    gates.mkdir()
    rounds = 6
    racers = [subprocess.Popen(
        [sys.executable, "-m", "tests.s3.lease_racer", str(config), str(i), str(rounds),
         str(gates)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        env={**_env(s3)}) for i in (0, 1)]
    results = []
    for racer in racers:
        out, err = racer.communicate(timeout=300)
        assert racer.returncode == 0, err[-4000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    for r in range(rounds):
        winners = [i for i, result in enumerate(results) if r in result["won"]]
        assert len(winners) == 1, f"round {r}: winners {winners} ({results})"
        assert all(r in results[i]["refused"] for i in (0, 1) if i not in winners)


@pytest.fixture(scope="module")
def runs(s3: S3Server, bucket: str, postgres: Any, workdir: Path, broker: str,
         tmp_path_factory: pytest.TempPathFactory) -> dict[str, Fleet]:
    """The module's two `sluice run --all`, started together (their JVMs start at once), on
    warehouses in the bucket: ``formats``, a Hudi project with a Hudi job and a job whose own
    table_format is iceberg (the Hadoop catalog, in the bucket too); ``jdbc``, an Iceberg
    project whose catalog is Iceberg's JDBC catalog in a database of the tests' PostgreSQL."""
    tag = secrets.token_hex(3)
    root = tmp_path_factory.mktemp("formats")
    formats = Fleet(root, workdir, broker, f"s{tag}", jobs=2, broken=False,
                    catalog=s3_config(s3, f"{bucket}/formats"))
    written = yaml.safe_load(formats.config.read_text())
    written["jobs"][formats.names[1]]["table_format"] = "iceberg"
    formats.config.write_text(yaml.safe_dump(written, sort_keys=False))
    root = tmp_path_factory.mktemp("jdbc")
    warehouse = f"{bucket}/jdbc"
    catalog = {**jdbc_catalog(postgres, f"s3_{tag}", root / "unused"), "warehouse": warehouse,
               "s3": s3_config(s3, warehouse)["s3"]}
    jdbc = Fleet(root, workdir, broker, f"j{tag}", jobs=1, broken=False, catalog=catalog,
                 table_format="iceberg")
    fleets = {"formats": formats, "jdbc": jdbc}
    started = []
    for fleet in fleets.values():
        fleet.produce(EVENTS)
        started.append((fleet, fleet.start(env=_env(s3))))
    for fleet, runner in started:
        assert fleet.finish(runner, "finish its run") == 0, fleet.last_log(runner)
    return fleets


def test_a_hudi_job_and_an_iceberg_job_on_s3_land_exactly_and_show_no_secret(
        spark: Any, s3: S3Server, bucket: str, runs: dict[str, Fleet]) -> None:
    """`sluice run --all` on a warehouse in the bucket: the project's Hudi job and a job whose
    own table_format is iceberg (the Hadoop catalog, in the bucket too). Every lake table
    equals its producer's oracle, meta.runs holds both runs, and the secret key is in no
    log, status file, meta.runs row or object of the bucket."""
    fleet = runs["formats"]
    hudi = s3_reader(spark, fleet.config, s3)
    iceberg = s3_reader(spark, fleet.config, s3, "iceberg")
    for name, session in zip(fleet.names, (hudi, iceberg), strict=True):
        for table in (f"lake.{name}", f"raw.{name}", f"errors.{name}__raw"):
            assert table_exists(session, table), table  # names the run's tables here
        expected = {t: as_lake(r) for t, r in fleet.generators[name].rows.items()}
        assert lake_rows(session, f"lake.{name}") == expected, name
        raw = session.sql(f"select count(*) from raw.{name}").collect()[0][0]
        errors = session.sql(f"select count(*) from errors.{name}__raw").collect()[0][0]
        assert raw + errors == fleet.produced[name] == EVENTS, name
    # by its path in the bucket: this process's catalog may already name another meta.runs
    # (the session's own warehouse, written by the tests before this one)
    meta = hudi.read.format("hudi").load(f"{bucket}/formats/meta/runs").collect()
    assert sorted(r["job"] for r in meta) == fleet.names

    secret = s3.secret_key
    assert secret not in "\n".join(str(r.asDict()) for r in meta)
    files = [*(p for run in runs.values() for p in run.root.rglob("*")),
             *(s3.data_dir / "buckets").rglob("*")]
    seen = [p for p in files if p.is_file() and secret.encode() in p.read_bytes()]
    assert not seen, f"the secret key is written in {seen}"


def test_an_iceberg_job_with_the_jdbc_catalog_on_postgresql_lands_its_rows_in_the_bucket(
        spark: Any, s3: S3Server, bucket: str, postgres: Any, runs: dict[str, Fleet]) -> None:
    """`sluice run --all` of an Iceberg project whose catalog is Iceberg's JDBC catalog in a
    private PostgreSQL database and whose warehouse is in the bucket: the table pointers are
    rows of PostgreSQL, every data and metadata file an object of the bucket, and the lake
    read back through the same catalog equals the producer's oracle."""
    import psycopg

    fleet = runs["jdbc"]
    name = fleet.names[0]
    warehouse = f"{bucket}/jdbc"
    database = yaml.safe_load(fleet.config.read_text())["catalog"]["uri"].rsplit("/", 1)[1]
    with psycopg.connect(postgres.dsn.replace("dbname=postgres", f"dbname={database}")) as conn:
        pointers: dict[str, str] = dict(conn.execute(
            "select table_namespace || '.' || table_name, metadata_location "
            "from iceberg_tables where catalog_name = 'sluice'").fetchall())
    for table in (f"lake.{name}", f"raw.{name}", "meta.runs"):
        assert pointers.get(table, "").startswith(f"{warehouse}/"), (table, pointers)
    objects = s3.data_dir / "buckets" / warehouse.removeprefix("s3a://")
    assert list((objects / "lake" / name).rglob("*.parquet")), "no data file in the bucket"

    session = s3_reader(spark, fleet.config, s3, "iceberg")
    expected = {t: as_lake(r) for t, r in fleet.generators[name].rows.items()}
    assert lake_rows(session, f"lake.{name}") == expected
    raw = session.sql(f"select count(*) from raw.{name}").collect()[0][0]
    errors = session.sql(f"select count(*) from errors.{name}__raw").collect()[0][0]
    assert raw + errors == fleet.produced[name] == EVENTS
    assert [r["job"] for r in session.sql("select job from meta.runs").collect()] == [name]


def test_a_runner_whose_jobs_always_have_a_backlog_hands_its_surplus_to_a_second_runner(
        spark: Any, s3: S3Server, bucket: str, workdir: Path, broker: str, tmp_path: Path,
        job_name: str) -> None:
    """Runner claims on the bucket (runner/claims.py): the first runner alone claims both
    jobs; a second one joins. While the first's jobs are busy at every refresh (a backlog: a
    batch always running), the surplus job starts no new batch and is given up after its
    batch; the second runner claims it. Before #60 the first kept both for as long as its
    jobs had a backlog, and the second ran nothing."""
    from python_ingest.runner.claims import Claims

    config = write_config(tmp_path / "sluice.yml", workdir, broker, {},
                          catalog=s3_config(s3, f"{bucket}/claims"))
    session = s3_reader(spark, config, s3)
    jobs = {f"{job_name[-20:]}_{x}": 0 for x in "ab"}
    first = Claims(session, jobs)
    second: Claims | None = None
    try:
        first.refresh(lambda name: False, force=True)
        assert sorted(n for n in jobs if first.holds(n)) == sorted(jobs)
        second = Claims(session, jobs)
        second.refresh(lambda name: False, force=True)
        assert not any(second.holds(n) for n in jobs)  # both claimed by the first
        first.refresh(lambda name: True, force=True)  # both jobs in a batch
        assert [n for n in jobs if first.holds(n)] == sorted(jobs)[:1], \
            "the surplus job would start another batch"
        first.refresh(lambda name: name != sorted(jobs)[1], force=True)  # its batch ended
        second.refresh(lambda name: False, force=True)
        assert [n for n in jobs if first.holds(n)] == sorted(jobs)[:1]
        assert [n for n in jobs if second.holds(n)] == sorted(jobs)[1:]
    finally:
        first.close()
        if second is not None:
            second.close()


def test_a_lease_file_removed_between_open_and_read_reads_as_gone(
        spark: Any, s3: S3Server, bucket: str, workdir: Path, broker: str,
        tmp_path: Path) -> None:
    """S3A opens lazily: the GET of a lease generation happens on the first read, so a racer
    that cleaned it away after this process listed and opened it gives a 404 there. That
    generation reads as gone (superseded), as a missing file does on open; before the fix the
    404 escaped and failed the racing test now and then."""
    from python_ingest.tables import lease

    config = write_config(tmp_path / "sluice.yml", workdir, broker, {},
                          catalog=s3_config(s3, f"{bucket}/lazy"))
    session = s3_reader(spark, config, s3)
    folder, fs = lease.lease_path(session, "lazy")
    fs.mkdirs(folder)
    assert lease._advance(fs, folder, 0, {"run": "r", "host": "h", "pid": 1,
                                          "expires": 9e9}) == 1
    [status] = [s for s in fs.listStatus(folder) if s.getPath().getName() == "1"]
    path = status.getPath()
    assert lease._read(fs, path) is not None

    class CleanedAfterOpen:  # the real S3A FileSystem; the file removed right after open
        def open(self, where: Any) -> Any:
            stream = fs.open(where)
            fs.delete(where, False)
            return stream

        def __getattr__(self, name: str) -> Any:
            return getattr(fs, name)

    assert lease._read(CleanedAfterOpen(), path) is None
    assert lease._read(fs, path) is None  # and gone for a plain open too


def _env(s3: S3Server) -> dict[str, str]:
    import os

    return {**os.environ, **s3.env()}
