"""The dispersal section of a job: parsed into targets, and errors that name the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from python_ingest.config import load_settings
from python_ingest.config.dispersal import KafkaTarget, PostgresTarget
from python_ingest.exceptions import ConfigError
from tests.conftest import REPO

pytestmark = pytest.mark.dispersal


def settings_with(tmp_path: Path, dispersal: Any) -> Any:
    path = tmp_path / "sluice.yml"
    path.write_text(yaml.safe_dump({"jobs": {"trips": {
        "topic": "t", "schema": str(REPO / "schemas" / "trips.avsc"), "row_key": ["trip_id"],
        "dispersal": dispersal}}}))
    return load_settings(path, env={})


def test_targets_are_parsed(tmp_path: Path) -> None:
    job = settings_with(tmp_path, {
        "mirror": {"type": "postgres", "url": "postgresql://app@db/app", "table": "lake.trips",
                   "password_env": "PG_PASSWORD"},
        "events": {"type": "kafka", "topic": "lake.trips"}}).job("trips")
    assert job.dispersal["mirror"] == PostgresTarget(
        name="mirror", table="lake.trips", dsn="postgresql://app@db/app",
        password_env="PG_PASSWORD")
    assert job.dispersal["events"] == KafkaTarget(name="events", topic="lake.trips")
    assert settings_with(tmp_path, None).job("trips").dispersal == {}


def test_the_dsn_comes_from_the_environment_when_named(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    target = settings_with(tmp_path, {"pg": {"type": "postgres", "dsn_env": "TRIPS_DSN",
                                             "table": "trips"}}).job("trips").dispersal["pg"]
    with pytest.raises(ConfigError, match=r"dispersal\.pg\.dsn_env.*TRIPS_DSN is not set"):
        target.conninfo("jobs.trips.dispersal.pg")
    monkeypatch.setenv("TRIPS_DSN", "host=h dbname=d")
    assert target.conninfo("x") == ("host=h dbname=d", None)


@pytest.mark.parametrize(("spec", "field", "problem"), [
    ({"type": "mysql"}, "pg.type", "expected one of postgres, kafka"),
    ({"type": "postgres", "table": "t"}, "pg.dsn", "is required"),
    ({"type": "postgres", "dsn": "x", "url": "y", "table": "t"}, "pg.url", "not both"),
    ({"type": "postgres", "dsn": "x", "table": "Bad Name"}, "pg.table", "schema.]table"),
    ({"type": "postgres", "dsn": "x", "table": "t", "colour": 1}, "pg.colour", "unknown"),
    ({"type": "postgres", "dsn": "x", "table": "t", "password": "a", "password_env": "B"},
     "pg.password", "one way"),
    ({"type": "kafka"}, "pg.topic", "expected a Kafka topic name"),
    ({"type": "kafka", "topic": "t", "chunk_rows": 0}, "pg.chunk_rows", "positive"),
])
def test_bad_targets_name_the_field(tmp_path: Path, spec: dict[str, Any], field: str,
                                    problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_with(tmp_path, {"pg": spec})
    assert caught.value.field == f"jobs.trips.dispersal.{field}"
    assert problem in str(caught.value)


def test_sluice_disperse_names_a_missing_target_before_starting_spark(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from python_ingest.cli import main as cli

    settings_with(tmp_path, {"events": {"type": "kafka", "topic": "lake.trips"}})
    config = str(tmp_path / "sluice.yml")
    assert cli.main(["--config", config, "disperse", "trips", "--to", "mirror"]) == 2
    assert "jobs.trips.dispersal': no dispersal target named 'mirror' (known targets: " \
        "events)" in capsys.readouterr().err
    settings_with(tmp_path, None)
    assert cli.main(["--config", config, "disperse", "trips"]) == 2
    assert "the job has no dispersal targets" in capsys.readouterr().err
