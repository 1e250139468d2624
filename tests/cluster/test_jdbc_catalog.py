"""Iceberg's JDBC catalog on PostgreSQL (issue #12.1): two processes commit to one table at
the same time; the catalog serializes the commits (a conditional update of the table's row), so
every commit a writer saw succeed is in the table once, and one refused after its retries left
nothing behind."""

from __future__ import annotations

import json
import subprocess
import sys
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
        assert time.monotonic() < deadline and all(w.poll() is None for w in writers), \
            "a writer did not get ready"
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
