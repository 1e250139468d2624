"""sluice's dbt plugin: a plain `dbt run` in a sluice project sees sluice's tables.

dbt loads every installed top-level module named ``dbt_*`` that lists ``plugins`` (dbt-core's
plugin manager) and constructs each plugin once per invocation, before any model runs. This
one opens sluice's SparkSession (``python_ingest.runtime.dbt_session``): on Hudi it names the
tables other processes created, which a fresh Spark session's catalog would not know; dbt-spark's
``method: session`` then takes that running session. Under the runner (dbt in-process) the
session is already open and nothing happens.
"""

from __future__ import annotations

import sys

from dbt.plugins.manager import dbtPlugin


class SluicePlugin(dbtPlugin):
    """Opens sluice's SparkSession for a dbt command that will use Spark."""

    def initialize(self) -> None:
        from python_ingest.runtime.dbt_session import open_for_dbt

        open_for_dbt(self.project_name, sys.argv)


plugins = [SluicePlugin]
