"""A dbt project per test: the repo's macros, profile and settings plus a converter, a suite
and a lake model for the test's own job (named after it), templated from the demo's."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import REPO


def write_project(root: Path, job: str, converter: str | None = None,
                  keep_tombstones: bool = False, mart: bool = False) -> Path:
    """A dbt project in ``root`` for ``job``: staging stg_test__<job>, lake model <job>
    (``mart``: and the demo's mart on it, marts.<job>_completed)."""
    for name in ("dbt_project.yml", "profiles.yml"):
        shutil.copy(REPO / name, root / name)
    if not (root / "macros").exists():
        (root / "macros").symlink_to(REPO / "macros")
    staging = root / "models" / "staging" / "test"
    lake = root / "models" / "lake"
    staging.mkdir(parents=True, exist_ok=True)
    lake.mkdir(parents=True, exist_ok=True)
    model = f"stg_test__{job}"
    _add_source_table(staging / "_test__sources.yml", "test", "raw", job)
    demo = (REPO / "models" / "staging" / "demo" / "stg_demo__trips.sql").read_text()
    sql = converter if converter is not None else demo.replace(
        "source('demo', 'trips')", f"source('test', '{job}')")
    (staging / f"{model}.sql").write_text(sql)
    _add_source_table(lake / "_lake__sources.yml", "fork", "staging", f"{model}__valid")
    lake_sql = (REPO / "models" / "lake" / "trips.sql").read_text()
    lake_sql = lake_sql.replace("stg_demo__trips", model)
    lake_sql = lake_sql.replace(", history=true", "")  # the demo's history: a test asks for it
    lake_sql = lake_sql.replace("keep_tombstones=false",
                                f"keep_tombstones={'true' if keep_tombstones else 'false'}")
    (lake / f"{job}.sql").write_text(lake_sql)
    if mart:
        marts = root / "models" / "marts"
        marts.mkdir(parents=True, exist_ok=True)
        sql = (REPO / "models" / "marts" / "completed_trips.sql").read_text()
        (marts / f"{job}_completed.sql").write_text(sql.replace(
            "ref('trips')", f"ref('{job}')").replace("trips__index", f"{job}__index"))
        (marts / "_marts__sources.yml").write_text(
            f"version: 2\nsources:\n  - name: sluice_meta\n    schema: meta\n    tables:\n"
            f"      - name: {job}__index\n")
    (root / "expectations").mkdir(exist_ok=True)
    shutil.copy(REPO / "expectations" / "stg_demo__trips.json",
                root / "expectations" / f"{model}.json")
    return root


def _add_source_table(path: Path, source: str, schema: str, table: str) -> None:
    """Declare ``table`` in the sources file ``path`` (one source), beside the tables an
    earlier job of the same project declared there."""
    tables = [line.split(":", 1)[1].strip() for line in
              (path.read_text().splitlines() if path.exists() else [])
              if line.startswith("      - name:")]
    listed = "".join(f"      - name: {t}\n" for t in dict.fromkeys([*tables, table]))
    path.write_text(f"version: 2\nsources:\n  - name: {source}\n    schema: {schema}\n"
                    f"    tables:\n{listed}")


@pytest.fixture
def project(tmp_path: Path) -> Callable[..., Path]:
    """project(job, converter=None, keep_tombstones=False, mart=False) → the project folder
    (tmp_path)."""

    def build(job: str, converter: str | None = None, keep_tombstones: bool = False,
              mart: bool = False) -> Path:
        return write_project(tmp_path, job, converter, keep_tombstones, mart)

    return build
