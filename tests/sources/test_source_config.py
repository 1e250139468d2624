"""``sources:`` in sluice.yml: the settings every kind has, and each kind's own; a setting of
another kind is a config error naming the setting, the source and its kind (#59.2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from python_ingest.config import load_settings
from python_ingest.exceptions import ConfigError

REPO = Path(__file__).resolve().parents[2]


def load(tmp_path: Path, sources: dict[str, Any], env: dict[str, str] | None = None) -> Any:
    path = tmp_path / "sluice.yml"
    path.write_text(yaml.safe_dump({"sources": sources}))
    return load_settings(path, env=env or {})


@pytest.mark.parametrize(("kind", "field", "value"), [
    ("postgres", "start_from", "earliest"),
    ("postgres", "server_id", 4300),
    ("mariadb", "slot", "sluice_shop"),
    ("mysql", "publication", "pub_1"),
    ("mariadb", "slot_lag_warn_bytes", 1 << 20),
    ("mysql", "database", "shop"),
])
def test_a_setting_of_another_kind_is_a_config_error(tmp_path: Path, kind: str, field: str,
                                                      value: Any) -> None:
    with pytest.raises(ConfigError) as raised:
        load(tmp_path, {"shop": {"kind": kind, field: value}})
    message = str(raised.value)
    assert raised.value.field == f"sources.shop.{field}", message
    assert f"source shop is kind {kind}" in message, message


def test_the_environment_overrides_still_apply_and_the_check_too(tmp_path: Path) -> None:
    path = tmp_path / "sluice.yml"
    path.write_text(yaml.safe_dump({"sources": {"shop": {"kind": "postgres"}}}))
    env = {"SLUICE_CONFIG": str(path), "SLUICE_STATE_DIR": str(tmp_path / "state")}
    settings = load_settings(env=env)
    assert (settings.state_dir, settings.source("shop").port) == (str(tmp_path / "state"), 5432)
    path.write_text(yaml.safe_dump({"sources": {"shop": {"kind": "postgres",
                                                         "start_from": "current"}}}))
    with pytest.raises(ConfigError, match=r"'sources\.shop\.start_from'.*kind postgres"):
        load_settings(env=env)


def test_an_unknown_setting_still_lists_the_kinds_settings(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"sources\.shop\.slots'.*unknown setting") as raised:
        load(tmp_path, {"shop": {"kind": "postgres", "slots": "x"}})
    assert "publication" in str(raised.value) and "start_from" not in str(raised.value)


def test_each_kind_has_its_own_settings_and_the_common_ones(tmp_path: Path) -> None:
    from python_ingest.config.source_kinds import BinlogOptions, PostgresOptions

    settings = load(tmp_path, {
        "maria": {"kind": "mariadb", "start_from": "earliest", "server_id": 4300,
                  "heartbeat_s": 2, "password_env": "MARIA_PW"},
        "shop": {"kind": "postgres", "database": "shop", "streaming": True,
                 "heartbeat_s": 3, "bootstrap_workers": 3}})
    maria, shop = settings.source("maria"), settings.source("shop")
    assert (maria.port, maria.heartbeat_s) == (3306, 2.0)
    assert maria.of(BinlogOptions) == BinlogOptions(server_id=4300, start_from="earliest")
    assert (shop.port, shop.heartbeat_s, shop.bootstrap_workers) == (5432, 3.0, 3)
    pg = shop.of(PostgresOptions)
    assert (pg.database, pg.streaming, pg.slot_name, pg.publication_name) == \
        ("shop", True, "sluice_shop", "sluice_shop")
    with pytest.raises(ConfigError, match="source shop is kind postgres"):
        shop.of(BinlogOptions)


def test_the_repos_configs_still_load(tmp_path: Path) -> None:
    """The demo's sluice.yml and the docs' examples of ``sources:`` are valid as they are."""
    load_settings(REPO / "sluice.yml", env={})
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for block in page.read_text().split("```yaml")[1:]:
            text = block.split("```")[0]
            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError:
                continue
            if not isinstance(data, dict) or not isinstance(data.get("sources"), dict):
                continue
            for name, raw in data["sources"].items():
                try:
                    load(tmp_path, {name: raw}, env={})
                except ConfigError as exc:  # an example's certificate or secret file
                    assert "does not exist" in str(exc), f"{page.name}: {exc}"
