"""The dbt plugin's decisions, without Spark: which dbt commands get sluice's session, and a
profile that would have dbt write other tables than sluice.yml says is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from python_ingest.config import load_settings
from python_ingest.exceptions import ConfigError
from python_ingest.runtime.dbt_session import check_profile_matches, uses_spark


@pytest.mark.parametrize(("argv", "expected"), [
    (["dbt", "run"], True),
    (["dbt", "--debug", "build", "--select", "x"], True),
    (["dbt", "docs", "generate"], True),
    (["dbt", "parse"], False),
    (["dbt", "ls", "--select", "lake"], False),
    (["dbt", "--version"], False),
    (["dbt"], False),
])
def test_only_commands_that_use_spark_get_a_session(argv: list[str], expected: bool) -> None:
    assert uses_spark(argv) is expected


def test_a_profile_rendering_another_format_or_warehouse_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "sluice.yml"
    config.write_text(f"table_format: iceberg\ncatalog:\n  warehouse: {tmp_path / 'wh'}\n")
    settings = load_settings(config, env={})
    check_profile_matches(settings, {"SLUICE_TABLE_FORMAT": "iceberg",
                                     "SLUICE_WAREHOUSE": str(tmp_path / "wh")})
    with pytest.raises(ConfigError, match="sluice.yml says iceberg but dbt's profile renders "
                       "hudi.*SLUICE_TABLE_FORMAT=iceberg"):
        check_profile_matches(settings, {"SLUICE_WAREHOUSE": str(tmp_path / "wh")})
    with pytest.raises(ConfigError, match="dbt's profile renders .*other.*"
                       f"SLUICE_WAREHOUSE={tmp_path / 'wh'}"):
        check_profile_matches(settings, {"SLUICE_TABLE_FORMAT": "iceberg",
                                         "SLUICE_WAREHOUSE": str(tmp_path / "other")})
