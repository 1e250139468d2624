"""#60: ``catalog.s3`` and a warehouse URL, read from sluice.yml and the environment, become
S3A's Spark settings; no secret in a repr or in sluice.yml; a local warehouse is unchanged.
``SLUICE_HOST`` is the host name leases, claims and the status file record and compare."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from python_ingest.config import Settings, load_settings
from python_ingest.exceptions import ConfigError
from python_ingest.runtime.session import spark_conf

pytestmark = [pytest.mark.s3]
S3A = "spark.hadoop.fs.s3a."


def settings_of(tmp_path: Path, catalog: dict[str, object], env: dict[str, str]) -> Settings:
    path = tmp_path / "sluice.yml"
    path.write_text(yaml.safe_dump({"catalog": catalog}))
    return load_settings(path, env=env)


def test_a_bucket_warehouse_gets_s3a_settings_and_the_keys_only_under_redacted_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEY", "AKIDEXAMPLE")
    monkeypatch.setenv("MY_SECRET", "s3cr3t-value")
    settings = settings_of(tmp_path, {"warehouse": "s3a://lake/prefix/", "s3": {
        "credentials": "env", "access_key_env": "MY_KEY", "secret_key_env": "MY_SECRET",
        "region": "eu-west-1"}},
        env={"SLUICE_S3_ENDPOINT": "http://127.0.0.1:9000", "SLUICE_S3_PATH_STYLE": "true"})
    conf = spark_conf(settings)
    assert conf["spark.sluice.warehouse"] == "s3a://lake/prefix"
    assert conf["spark.sql.catalog.sluice.warehouse"] == "s3a://lake/prefix"
    assert conf[S3A + "endpoint"] == "http://127.0.0.1:9000"
    assert conf[S3A + "connection.ssl.enabled"] == "false"
    assert conf[S3A + "path.style.access"] == "true"
    assert conf[S3A + "endpoint.region"] == "eu-west-1"
    assert conf[S3A + "access.key"] == "AKIDEXAMPLE"
    assert [k for k, v in conf.items() if v == "s3cr3t-value"] == [S3A + "secret.key"]
    assert "s3cr3t" not in repr(settings)


def test_an_aws_credentials_file_and_the_chain(tmp_path: Path) -> None:
    (tmp_path / "aws").write_text("[ingest]\naws_access_key_id = AKIDFILE\n"
                                  "aws_secret_access_key = from-file\n")
    settings = settings_of(tmp_path, {"warehouse": "s3a://lake/w", "s3": {
        "credentials": "file", "credentials_file": "aws", "profile": "ingest"}}, env={})
    conf = spark_conf(settings)
    assert (conf[S3A + "access.key"], conf[S3A + "secret.key"]) == ("AKIDFILE", "from-file")
    chain = spark_conf(settings_of(tmp_path, {"warehouse": "s3a://lake/w"}, env={}))
    assert S3A + "secret.key" not in chain and S3A + "aws.credentials.provider" not in chain
    with pytest.raises(ConfigError, match="MY_SECRET is not set"):
        spark_conf(settings_of(tmp_path, {"warehouse": "s3a://lake/w", "s3": {
            "credentials": "env", "secret_key_env": "MY_SECRET"}}, env={}))
    with pytest.raises(ConfigError, match="catalog.s3"):
        settings_of(tmp_path, {"warehouse": "s3a://lake/w", "s3": {"secret_key": "x"}}, env={})


def test_a_local_warehouse_gets_no_s3_settings(tmp_path: Path) -> None:
    conf = spark_conf(settings_of(tmp_path, {}, env={}))
    assert conf["spark.sluice.warehouse"] == str(tmp_path / ".sluice" / "warehouse")
    assert not [k for k in conf if k.startswith(S3A)]


def test_sluice_host_names_this_host_in_leases_and_decides_who_died_here(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``SLUICE_HOST`` a process records that name, and a dead holder is taken over at
    once only when it names the same host: a holder under the system's host name is another
    host's (its pid says nothing here), one under ``SLUICE_HOST`` whose pid is gone died
    here. The status file names the runner's host the same way."""
    import socket
    import subprocess

    from python_ingest.runtime.processes import gone_from_this_host
    from python_ingest.tables.status import StatusFile

    dead = subprocess.Popen(["true"])
    dead.wait()
    monkeypatch.setenv("SLUICE_HOST", "host-b")
    assert gone_from_this_host({"host": "host-b", "pid": dead.pid})
    assert not gone_from_this_host({"host": socket.gethostname(), "pid": dead.pid})
    status = StatusFile(tmp_path / "state")
    status.record_runner("starting", [])
    assert status.read()["runner"]["host"] == "host-b"
    monkeypatch.delenv("SLUICE_HOST")
    assert gone_from_this_host({"host": socket.gethostname(), "pid": dead.pid})
