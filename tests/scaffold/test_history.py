"""The scaffold's ``--history``: the lake models it writes keep a history table (issue #52.8)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from python_ingest.scaffold.dbt import lake_config
from tests.steps.conftest import write_project

pytestmark = pytest.mark.history


def test_history_option_reaches_the_lake_models_config(tmp_path: Path, make_settings: Any,
                                                       job_name: str) -> None:
    """What the scaffold writes with --history is what dbt reads as the model's config (the
    materialization's `history: true`); without it the model has none."""
    from python_ingest.steps.dbt import Dbt
    from tests.conftest import trips_job

    assert lake_config() == "{{ config(materialized='lake_merge') }}\n"
    assert lake_config(history=True) == \
        "{{ config(materialized='lake_merge', history=true) }}\n"
    write_project(tmp_path, job_name)
    model = tmp_path / "models" / "lake" / f"{job_name}.sql"
    model.write_text(lake_config(history=True) + model.read_text())
    plain = f"{job_name}_plain"
    write_project(tmp_path, plain)
    settings = make_settings({job_name: trips_job(job_name), plain: trips_job(plain)})
    manifest = Dbt(settings).manifest()
    configs = {n.name: n.config for n in manifest.nodes.values()}
    assert configs[job_name].get("history") is True
    assert configs[job_name].materialized == "lake_merge"
    assert not configs[plain].get("history")
