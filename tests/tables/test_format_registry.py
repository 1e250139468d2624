"""The table format: one default, one accessor, one registry (config/table_formats.py, #59).

Checked on the source as tests/test_layers.py checks the layout: no module but the accessor
reads the session's format setting, no module compares a format's name where the registry
says the difference, and every default the project spells (Python, dbt's macros and
profiles) is the registry's one default.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from python_ingest.config import Settings, load_settings
from python_ingest.config.table_formats import (
    DEFAULT_FORMAT,
    FORMAT_CONF,
    FORMATS,
    TABLE_FORMATS,
    format_named,
    session_format,
)
from python_ingest.exceptions import ConfigError

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "python_ingest"
ACCESSOR = PACKAGE / "config" / "table_formats.py"
# modules still allowed a format's name in a comparison, and why:
# - tables/native.py: the readers without a JVM (hudi-rs, pyiceberg) are per format by nature
#   (docs/table-formats.md: a new format adds its reader there, or raises NativeUnavailable)
COMPARES_NAMES = {"tables/native.py"}
READS_SETTING: set[str] = set()


def modules() -> list[tuple[str, ast.Module]]:
    return [(str(p.relative_to(PACKAGE)), ast.parse(p.read_text()))
            for p in sorted(PACKAGE.rglob("*.py")) if p != ACCESSOR]


def test_no_module_but_the_accessor_reads_the_session_format() -> None:
    """``spark.conf.get(FORMAT_CONF, ...)`` or the key spelled out: only session_format."""
    found = []
    for name, tree in modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value == FORMAT_CONF:
                found.append(f"{name}:{node.lineno} spells {FORMAT_CONF}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "get" and any(
                        isinstance(a, ast.Name) and a.id == "FORMAT_CONF" for a in node.args) \
                    and name not in READS_SETTING:
                found.append(f"{name}:{node.lineno} reads FORMAT_CONF")
    assert not found, "read the format through config.table_formats.session_format: " \
        + "; ".join(found)


def test_no_module_compares_a_format_name() -> None:
    """``x == "hudi"``: the difference belongs in the format's FormatSpec (or TableFormat)."""
    found = []
    for name, tree in modules():
        if name in COMPARES_NAMES:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(
                    isinstance(c, ast.Constant) and c.value in FORMATS
                    for c in [node.left, *node.comparators]):
                found.append(f"{name}:{node.lineno}")
    assert not found, "compares a table format's name (ask its FormatSpec): " + "; ".join(found)


def test_every_default_is_the_registry_default(tmp_path: Path) -> None:
    """sluice.yml without table_format, the Settings default, a session sluice did not set,
    and every env_var('SLUICE_TABLE_FORMAT', <default>) in dbt's files say the same."""
    (tmp_path / "sluice.yml").write_text("jobs: {}\n")
    assert load_settings(tmp_path / "sluice.yml", env={}).table_format == DEFAULT_FORMAT
    assert Settings.table_format == DEFAULT_FORMAT

    class Conf:
        def get(self, key: str, default: str | None = None) -> str | None:
            return default

    class Session:
        conf = Conf()

    assert session_format(Session()).name == DEFAULT_FORMAT  # type: ignore[arg-type]
    spelled = re.compile(r"""env_var\(\s*['"]SLUICE_TABLE_FORMAT['"]\s*,\s*['"](\w+)['"]""")
    files = [*REPO.joinpath("macros").rglob("*.sql"), REPO / "dbt_project.yml",
             REPO / "profiles.yml"]
    defaults = {f"{f.relative_to(REPO)}: {d}" for f in files
                for d in spelled.findall(f.read_text())}
    assert defaults, "no env_var('SLUICE_TABLE_FORMAT', ...) found: the check reads nothing"
    assert all(d.endswith(f": {DEFAULT_FORMAT}") for d in defaults), sorted(defaults)


def test_an_unknown_format_is_a_config_error_naming_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown table format 'delta'.*hudi, iceberg"):
        format_named("delta")

    class Conf:
        def get(self, key: str, default: str | None = None) -> str | None:
            return "paimon" if key == FORMAT_CONF else default

    class Session:
        conf = Conf()

    with pytest.raises(ConfigError, match=f"'{FORMAT_CONF}'.*'paimon'.*hudi, iceberg"):
        session_format(Session())  # type: ignore[arg-type]
    (tmp_path / "sluice.yml").write_text("table_format: delta\njobs: {}\n")
    with pytest.raises(ConfigError, match="table_format.*'delta' is not one of hudi, iceberg"):
        load_settings(tmp_path / "sluice.yml", env={})


@pytest.mark.parametrize("name", TABLE_FORMATS)
def test_each_registered_format_is_implemented_under_its_name(name: str) -> None:
    from python_ingest.tables.formats import implementation

    spec = format_named(name.upper())
    assert spec.name == name
    assert implementation(spec).name == name
    assert implementation(name) is implementation(spec)
