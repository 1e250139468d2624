"""The S3 tests' server: a private S3Proxy (python_ingest/runtime/s3proxy.py) on a free loopback
port, one per test session (a bucket per module), and a session of the test process that
reads its tables."""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from python_ingest.runtime.s3proxy import S3Server
from tests.servers import require_fixture_servers


def pytest_runtest_setup(item: pytest.Item) -> None:
    require_fixture_servers(item)


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A private S3 server for the session's S3 tests (its objects in a temporary folder):
    one start, and one endpoint for the test JVM's S3A (after a module's server stopped, a
    Hudi read of the next module's bucket in the same process was seen retrying for minutes
    against a stopped endpoint). The cluster test stops it for 20 s and starts it again on
    the same port and data."""
    server = S3Server(tmp_path_factory.mktemp("s3proxy")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def bucket(s3: S3Server) -> str:
    """A bucket of its own for this module (the test JVM caches one S3A client per bucket:
    a new server's bucket must have a new name)."""
    return s3.bucket(f"sluice-{secrets.token_hex(4)}")


def s3_config(s3: S3Server, warehouse: str) -> dict[str, Any]:
    """sluice.yml's ``catalog`` for a warehouse on ``s3``: keys from the AWS variables
    (``s3.env()``), the endpoint from ``SLUICE_S3_ENDPOINT``."""
    return {"name": "sluice", "type": "hadoop", "warehouse": warehouse,
            "s3": {"path_style": True, "region": "us-east-1", "credentials": "env"}}


def s3_reader(spark: Any, config: Path, s3: S3Server, table_format: str | None = None) -> Any:
    """A session of the test process reading the tables of the sluice.yml ``config`` names
    (its warehouse on ``s3``): the S3A settings on the test JVM's Hadoop configuration, the
    warehouse and catalog settings on a new session (writing ``table_format``, by default the
    project's)."""
    from python_ingest.config import load_settings
    from python_ingest.runtime.session import prepare_catalog, spark_conf

    settings = load_settings(config, env=s3.env())
    s3_settings = dataclasses.replace(settings.catalog.s3, credentials="chain")
    conf = spark_conf(dataclasses.replace(
        settings, catalog=dataclasses.replace(settings.catalog, s3=s3_settings)))
    hadoop = spark._jsc.hadoopConfiguration()
    for key, value in conf.items():
        if key.startswith("spark.hadoop.fs.s3a."):
            hadoop.set(key.removeprefix("spark.hadoop."), value)
    hadoop.set("fs.s3a.access.key", s3.access_key)
    hadoop.set("fs.s3a.secret.key", s3.secret_key)
    session = spark.newSession()
    for key, value in conf.items():
        if key.startswith(("spark.sql.catalog.", "spark.sluice.")) or key in (
                "spark.sql.defaultCatalog",):
            session.conf.set(key, value)
    if table_format == "iceberg":  # a job's own format in a Hudi project
        session.conf.set("spark.sluice.table_format", "iceberg")
        session.conf.set("spark.sql.defaultCatalog", settings.catalog.name)
    prepare_catalog(session)
    return session
