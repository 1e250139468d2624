"""sluice's dbt plugin: a plain `dbt run` in a sluice project sees sluice's tables and does the
transform half of every job (converter, Great Expectations fork, merge).

dbt loads every installed top-level module named ``dbt_*`` that lists ``plugins`` (dbt-core's
plugin manager) and constructs each plugin once per invocation, before any model runs. This
one
- opens sluice's SparkSession (``python_ingest.runtime.dbt_session``): on Hudi it names the
  tables other processes created, which a fresh Spark session's catalog would not know;
  dbt-spark's ``method: session`` then takes that running session. Under the runner (dbt
  in-process) the session is already open and nothing happens;
- gives dbt-spark's adapter sluice's steps as ``adapter.sluice_*`` macro functions
  (``python_ingest.steps.transform``): the converters take their job's lease, the lake
  models fork and merge the pending batches with the runner's checkpoints.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from dbt.plugins.manager import dbtPlugin

STEPS = ("hold", "plan_lake", "begin_merge", "var", "commit_merge", "finish", "keep_settings",
         "fault", "widen", "history", "lake_properties", "bucket_index")


def _step(name: str) -> Callable[..., Any]:
    """``python_ingest.steps.transform.<name>``, imported on first call (a ``dbt parse``
    imports no Spark)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        from python_ingest.steps import transform

        return getattr(transform, name)(*args, **kwargs)

    call.__name__ = f"sluice_{name}"
    return call


def install_adapter_functions() -> None:
    """Expose sluice's steps to dbt's Jinja as ``adapter.<name>`` (stubbed to None while dbt
    parses, so parsing never takes a lease or starts Spark work)."""
    from dbt.adapters.spark import SparkAdapter

    functions = {f"sluice_{name}": _step(name) for name in STEPS}
    if set(functions) <= SparkAdapter._available_:
        return
    for name, function in functions.items():
        setattr(SparkAdapter, name, staticmethod(function))
        SparkAdapter._parse_replacements_[name] = lambda *args, **kwargs: None
    SparkAdapter._available_ = SparkAdapter._available_ | frozenset(functions)


def _flag_source() -> str:
    """The module that made a behavior flag: the first caller outside dbt-common's
    behavior_flags, by its frames' globals."""
    from dbt_common import behavior_flags

    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_globals.get("__name__")
        if name and name != behavior_flags.__name__:
            return str(name)
        frame = frame.f_back  # type: ignore[assignment]
    return "Unknown"


def quick_flag_sources() -> None:
    """dbt-common names the module behind each of an adapter's behavior flags (shown only
    if a flag warns) with ``inspect.stack()``, which reads the source lines of every frame on
    the stack, for each flag, at each of the two adapter registrations of every dbt command
    (4 ms a flag 80 frames deep; a fifth of in-process dbt's Python time in a profile of the
    tests). The same name from the frames' globals, without reading any file."""
    try:
        from dbt_common import behavior_flags
    except ImportError:  # another dbt-common: its own way
        return
    rendered = getattr(behavior_flags, "BehaviorFlagRendered", None)
    if rendered is not None and hasattr(rendered, "_default_source"):
        rendered._default_source = staticmethod(_flag_source)


class SluicePlugin(dbtPlugin):
    """Opens sluice's SparkSession for a dbt command that will use Spark."""

    def initialize(self) -> None:
        from python_ingest.runtime.dbt_session import open_for_dbt

        quick_flag_sources()
        install_adapter_functions()
        open_for_dbt(self.project_name, sys.argv)


plugins = [SluicePlugin]
