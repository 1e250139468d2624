"""dbt_sluice names the module behind a dbt behavior flag as dbt-common does, without the
``inspect.stack()`` that read the source lines of every frame at each adapter registration."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from dbt_common import behavior_flags

from dbt_sluice import quick_flag_sources

FLAG: Any = {"name": "sluice_test_flag", "default": False, "description": "a test flag"}


def _source() -> str:
    return str(behavior_flags.BehaviorFlagRendered(FLAG, {})._behavior_change_event.flag_source)


def test_a_flag_names_the_module_that_made_it_without_reading_source_files(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rendered = behavior_flags.BehaviorFlagRendered
    monkeypatch.setattr(rendered, "_default_source", rendered.__dict__["_default_source"])
    assert _source() == __name__  # dbt-common's own way
    quick_flag_sources()
    stacks: list[int] = []
    monkeypatch.setattr(inspect, "stack", lambda *args, **kwargs: stacks.append(1) or [])
    assert _source() == __name__ and not stacks
    # a flag that names its source keeps it
    assert str(rendered({**FLAG, "source": "dbt.adapters.spark"}, {})
               ._behavior_change_event.flag_source) == "dbt.adapters.spark"
