"""The SparkSession a plain `dbt` command gets in a sluice project (see ``dbt_sluice``).

dbt-spark's ``method: session`` builds a session from profiles.yml, which on Hudi knows no
table: Hudi tables are named per process (``runtime.catalog``). Opened here first, the session
is sluice's own (jars, both formats, the tables found in the warehouse registered), and
dbt-spark's ``getOrCreate`` returns it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

from python_ingest.config import CONFIG_ENV, DEFAULT_CONFIG_FILE, Settings, load_settings
from python_ingest.exceptions import ConfigError

log = logging.getLogger(__name__)

# dbt commands that never open a connection: no JVM for them
NO_SPARK = {"clean", "debug", "deps", "init", "list", "ls", "parse", "--help", "-h",
            "--version"}


def wanted(project_name: str, argv: Sequence[str], env: dict[str, str] | None = None) -> bool:
    """Whether this dbt invocation is a sluice project's command that will use Spark and has
    no session yet (under the runner dbt runs in-process, on the runner's session)."""
    from pyspark.sql import SparkSession

    env = dict(os.environ) if env is None else env
    if SparkSession.getActiveSession() is not None or SparkSession._instantiatedSession:
        return False
    if env.get("SLUICE_DBT_TARGET", "embedded") != "embedded":
        return False  # a Thrift server holds the session (and names the tables) itself
    if project_name != "sluice" and not (env.get(CONFIG_ENV)
                                         or Path(DEFAULT_CONFIG_FILE).is_file()):
        return False  # not a sluice project
    return uses_spark(argv)


def uses_spark(argv: Sequence[str]) -> bool:
    """Whether the dbt command line ``argv`` (``dbt [options] command ...``) opens Spark."""
    command = next((a for a in argv[1:] if not a.startswith("-") or a in NO_SPARK), None)
    return command is not None and command not in NO_SPARK


def check_profile_matches(settings: Settings, env: dict[str, str]) -> None:
    """profiles.yml takes the format and the warehouse from the environment (dbt renders it
    before any plugin runs); a different sluice.yml would have dbt write other tables."""
    profile_format = env.get("SLUICE_TABLE_FORMAT", Settings.table_format).strip().lower()
    if profile_format != settings.table_format:
        raise ConfigError("table_format", f"sluice.yml says {settings.table_format} but dbt's "
                          f"profile renders {profile_format}",
                          f"run dbt with SLUICE_TABLE_FORMAT={settings.table_format}")
    warehouse = settings.path(settings.catalog.warehouse)
    profile_warehouse = Path(env.get("SLUICE_WAREHOUSE", ".sluice/warehouse")).resolve()
    if settings.catalog.type == "hadoop" and profile_warehouse != warehouse:
        raise ConfigError("catalog.warehouse", f"sluice.yml's warehouse is {warehouse} but "
                          f"dbt's profile renders {profile_warehouse}",
                          f"run dbt with SLUICE_WAREHOUSE={warehouse}")


def open_for_dbt(project_name: str, argv: Sequence[str]) -> None:
    """Open sluice's session for this dbt invocation if it will use Spark."""
    if not wanted(project_name, argv):
        return
    from python_ingest.runtime.session import build_session

    env = dict(os.environ)
    settings = load_settings(env=env)
    check_profile_matches(settings, env)
    log.info("dbt: opening sluice's Spark session (%s tables in %s)", settings.table_format,
             settings.catalog.warehouse)
    build_session(settings, every_table=True)  # a model may read any table
