"""Iceberg's JDBC catalog on PostgreSQL (issue #12.1): two processes commit to one table at
the same time; the catalog serializes the commits (a conditional update of the table's row), so
every commit a writer saw succeed is in the table once, and one refused after its retries left
nothing behind."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.jdbc import jdbc_catalog, reader
from tests.conftest import REPO, STATE_DIR

pytestmark = [pytest.mark.e2e, pytest.mark.cluster]

COMMITS = 12


def test_two_processes_commit_to_one_table_through_the_jdbc_catalog(
        spark: Any, postgres: Any, tmp_path: Path, job_name: str) -> None:
    catalog = jdbc_catalog(postgres, job_name[-40:], tmp_path / "warehouse")
    config = tmp_path / "sluice.yml"
    config.write_text(yaml.safe_dump({"table_format": "iceberg", "catalog": catalog,
                                      "spark": {"master": "local[1]"},
                                      "state_dir": str(STATE_DIR), "jobs": {}}))
    session = reader(spark, config)
    session.sql("create namespace if not exists meta")
    session.sql("create table meta.commits (writer int, i int) using iceberg")
    logs = [open(tmp_path / f"writer-{w}.log", "w") for w in (1, 2)]  # noqa: SIM115
    writers = [subprocess.Popen(
        [sys.executable, "-m", "tests.cluster.jdbc_writer", str(config), "meta.commits",
         str(w), str(COMMITS), str(tmp_path)], stdout=subprocess.PIPE, stderr=log, text=True,
        cwd=REPO) for w, log in zip((1, 2), logs, strict=True)]
    deadline = time.monotonic() + 300  # both sessions up, then both commit at once
    while not all((tmp_path / f"ready-{w}").exists() for w in (1, 2)):
        for w, writer in zip((1, 2), writers, strict=True):
            assert writer.poll() is None, \
                f"writer {w} ended before it was ready: " + \
                (tmp_path / f"writer-{w}.log").read_text()[-4000:]
        assert time.monotonic() < deadline, "a writer did not get ready within 300 s"
        time.sleep(0.1)
    (tmp_path / "go").touch()
    results = []
    for w, writer in zip((1, 2), writers, strict=True):
        out, _ = writer.communicate(timeout=600)
        logs[w - 1].close()
        assert writer.returncode == 0, (tmp_path / f"writer-{w}.log").read_text()[-4000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    first, second = results
    assert first["started"] < second["ended"] and second["started"] < first["ended"], \
        "the writers did not overlap"
    rows = sorted(tuple(r) for r in session.sql("select writer, i from meta.commits").collect())
    expected = sorted((w, i) for w, result in zip((1, 2), results, strict=True)
                      for i in result["committed"])
    assert rows == expected  # no lost commit, none twice, nothing of a refused one
    assert len(expected) + sum(len(r["refused"]) for r in results) == 2 * COMMITS
    snapshots = session.sql("select count(*) from meta.commits.snapshots").collect()[0][0]
    assert snapshots == len(expected)
    # the table's current metadata is the catalog's row in PostgreSQL
    import psycopg

    database = catalog["uri"].rsplit("/", 1)[1]
    with psycopg.connect(postgres.dsn.replace("dbname=postgres", f"dbname={database}")) as conn:
        row = conn.execute("select metadata_location from iceberg_tables where "
                           "table_namespace = 'meta' and table_name = 'commits'").fetchone()
    assert row is not None and row[0].startswith(str(tmp_path / "warehouse"))


@pytest.mark.reliability
def test_two_processes_creating_the_namespaces_at_once_both_start(
        spark: Any, postgres: Any, tmp_path: Path, job_name: str) -> None:
    """Spark's ``create namespace if not exists`` checks, then inserts the namespace's row; two
    sessions doing so at the same moment on one JDBC catalog made the later insert fail
    (a writer of the test above died at start in CI). Two sessions with their own catalog
    connections race on 30 namespaces: every creation succeeds and each namespace exists."""
    from python_ingest.runtime.session import activate, create_namespace

    catalog = jdbc_catalog(postgres, job_name[-40:], tmp_path / "warehouse")
    config = tmp_path / "sluice.yml"
    config.write_text(yaml.safe_dump({"table_format": "iceberg", "catalog": catalog,
                                      "state_dir": str(STATE_DIR), "jobs": {}}))
    sessions = [reader(spark, config) for _ in range(2)]
    names = [f"race_{i}" for i in range(30)]
    failures: list[str] = []

    def create(session: Any, barrier: threading.Barrier, name: str) -> None:
        activate(session)
        barrier.wait()
        try:
            create_namespace(session, name)
        except Exception as exc:  # noqa: BLE001 - the assertion below names it
            failures.append(f"{name}: {str(exc)[:300]}")

    for name in names:
        barrier = threading.Barrier(len(sessions))
        threads = [threading.Thread(target=create, args=(s, barrier, name)) for s in sessions]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert failures == []
    found = {r[0] for r in sessions[0].sql("show namespaces like 'race_*'").collect()}
    assert found == set(names)
