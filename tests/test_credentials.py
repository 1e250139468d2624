"""Source passwords (issue #9.13): never in a repr, a log line or an error; password_env and
password_file are the documented ways, a plaintext password is accepted with a warning."""

from __future__ import annotations

import json
import logging
import stat
from pathlib import Path
from typing import Any

import pytest

from python_ingest.config import load_settings
from python_ingest.exceptions import ConfigError
from python_ingest.steps.pipeline import report_dir

SECRET = "hunter2-very-secret"


def _config(tmp_path: Path, source: dict[str, Any]) -> Path:
    path = tmp_path / "sluice.json"
    path.write_text(json.dumps({"state_dir": str(tmp_path / "state"),
                                "sources": {"shop": {"host": "db", **source}}}))
    return path


@pytest.mark.reliability
def test_repr_of_a_source_and_of_the_settings_never_shows_the_password(tmp_path: Path) -> None:
    settings = load_settings(_config(tmp_path, {"password": SECRET}), env={})
    source = settings.source("shop")
    assert source.secret() == SECRET
    assert SECRET not in repr(source) and SECRET not in str(source)
    assert SECRET not in repr(settings)


@pytest.mark.reliability
def test_password_file_is_read_relative_to_the_config(tmp_path: Path, caplog) -> None:
    secret_file = tmp_path / "shop.password"
    secret_file.write_text(SECRET + "\n")
    secret_file.chmod(0o600)
    with caplog.at_level(logging.WARNING):
        settings = load_settings(_config(tmp_path, {"password_file": "shop.password"}), env={})
    source = settings.source("shop")
    assert source.secret() == SECRET  # the trailing newline of `echo ... > file` is not part
    assert SECRET not in repr(source) and not caplog.records


@pytest.mark.reliability
def test_a_missing_password_file_fails_naming_the_field_not_a_secret(tmp_path: Path) -> None:
    settings = load_settings(_config(tmp_path, {"password_file": "nope.password"}), env={})
    with pytest.raises(ConfigError) as err:
        settings.source("shop").secret()
    assert err.value.field == "sources.shop.password_file" and "nope.password" in str(err.value)


@pytest.mark.reliability
def test_a_plaintext_password_is_accepted_with_a_warning_without_it(tmp_path: Path,
                                                                   caplog) -> None:
    with caplog.at_level(logging.WARNING):
        settings = load_settings(_config(tmp_path, {"password": SECRET}), env={})
    assert settings.source("shop").secret() == SECRET
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("sources.shop.password" in w and "password_file" in w for w in warnings), warnings
    assert not any(SECRET in w for w in warnings)


@pytest.mark.reliability
def test_two_ways_of_giving_the_password_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(_config(tmp_path, {"password": SECRET, "password_env": "X"}), env={})
    assert err.value.field == "sources.shop.password" and SECRET not in str(err.value)


@pytest.mark.reliability
def test_the_reports_folder_is_owner_only(tmp_path: Path) -> None:
    settings = load_settings(_config(tmp_path, {}), env={})
    folder = report_dir(settings, "trips")
    reports = tmp_path / "state" / "reports"
    assert folder.parent == reports
    assert stat.S_IMODE(reports.stat().st_mode) == 0o700  # error summaries hold source data


@pytest.mark.reliability
def test_the_tap_checkpoint_is_owner_only(tmp_path: Path) -> None:
    from python_ingest.sources.binlog.position import (
        BinlogCheckpoint,
        BinlogCheckpointStore,
        BinlogPosition,
    )

    store = BinlogCheckpointStore(tmp_path / "state", "shop")
    store.save(BinlogCheckpoint(BinlogPosition("binlog.000001", 4),
                                stopped={"shop.t": {"error": "the row key ('p|q', 'r') ..."}}))
    assert stat.S_IMODE(store.folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
