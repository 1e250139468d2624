"""A fleet of demo jobs: N copies of the trips pipeline, each its own topic, raw, staging and
lake table, in one dbt project. What the runner's demo, tests and benchmarks run many jobs on.

``write_fleet(root, names)`` writes the dbt project (converter ``stg_fleet__<name>``, lake
model ``<name>``, the demo's expectation suite per converter) and returns the jobs' config
mappings for sluice.yml (topic ``fleet.<name>``). ``broken`` names get a converter that fails
(a column that does not exist), as a user's mistake would; ``fix_converter`` repairs one.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from python_ingest.runtime.jars import repo_root

SOURCE = "fleet"
BROKEN_SELECT = "    select *, no_such_column_in_raw as broken_on_purpose from "


def topic_of(name: str) -> str:
    return f"{SOURCE}.{name}"


def converter_name(name: str) -> str:
    return f"stg_{SOURCE}__{name}"


def _converter_sql(name: str, broken: bool) -> str:
    repo = repo_root()
    sql = (repo / "models" / "staging" / "demo" / "stg_demo__trips.sql").read_text()
    sql = sql.replace("source('demo', 'trips')", f"source('{SOURCE}', '{name}')")
    if broken:  # a column raw does not have: Spark refuses the query, dbt fails the model
        sql = sql.replace("    select * from {{ source(", BROKEN_SELECT + "{{ source(")
    return sql


def write_fleet(root: Path, names: Iterable[str], broken: Iterable[str] = (),
                priorities: dict[str, int] | None = None) -> dict[str, dict[str, Any]]:
    """Write the fleet's dbt project into ``root``; the jobs' sluice.yml mappings."""
    repo = repo_root()
    names, broken = list(names), set(broken)
    for file in ("dbt_project.yml", "profiles.yml"):
        shutil.copy(repo / file, root / file)
    if not (root / "macros").exists():
        (root / "macros").symlink_to(repo / "macros")
    staging = root / "models" / "staging" / SOURCE
    lake = root / "models" / "lake"
    expectations = root / "expectations"
    for folder in (staging, lake, expectations):
        folder.mkdir(parents=True, exist_ok=True)
    tables = "".join(f"      - name: {n}\n" for n in names)
    (staging / f"_{SOURCE}__sources.yml").write_text(
        f"version: 2\nsources:\n  - name: {SOURCE}\n    schema: raw\n    tables:\n{tables}")
    valid = "".join(f"      - name: {converter_name(n)}__valid\n" for n in names)
    (lake / "_lake__sources.yml").write_text(
        f"version: 2\nsources:\n  - name: fork\n    schema: staging\n    tables:\n{valid}")
    # the demo's lake model without its history (a fleet job keeps none)
    lake_sql = (repo / "models" / "lake" / "trips.sql").read_text().replace(", history=true", "")
    suite = repo / "expectations" / "stg_demo__trips.json"
    jobs = {}
    for name in names:
        (staging / f"{converter_name(name)}.sql").write_text(
            _converter_sql(name, name in broken))
        (lake / f"{name}.sql").write_text(lake_sql.replace("stg_demo__trips",
                                                           converter_name(name)))
        shutil.copy(suite, expectations / f"{converter_name(name)}.json")
        jobs[name] = {"topic": topic_of(name), "schema": str(repo / "schemas" / "trips.avsc"),
                      "row_key": ["trip_id"], "ref_key": "_ref_key",
                      "priority": (priorities or {}).get(name, 0)}
    return jobs


def fix_converter(root: Path, name: str) -> None:
    """Repair a converter ``write_fleet`` broke on purpose."""
    path = root / "models" / "staging" / SOURCE / f"{converter_name(name)}.sql"
    path.write_text(_converter_sql(name, broken=False))
