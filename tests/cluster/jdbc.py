"""Iceberg JDBC catalogs on the tests' private PostgreSQL: a fresh database per catalog, and a
session of the test process that reads one."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def jdbc_catalog(postgres: Any, database: str, warehouse: Path) -> dict[str, str]:
    """A fresh database of the private PostgreSQL for one Iceberg JDBC catalog (named
    ``c_<database>``: a test's job name may not start as an identifier must)."""
    import psycopg

    database = f"c_{database}"
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        conn.execute(f"create database {database}")
    return {"name": "sluice", "type": "jdbc", "user": "sluice", "warehouse": str(warehouse),
            "uri": f"postgresql://127.0.0.1:{postgres.port}/{database}"}


def reader(spark: Any, config: Path) -> Any:
    """A session of the test process that reads, by their names, the tables of the catalog
    ``config`` (a sluice.yml) names: its catalog settings as sluice's own session gets them
    (a JDBC catalog's rows carry the catalog's name, so the reader's has the runner's)."""
    from python_ingest.config import load_settings
    from python_ingest.runtime.session import spark_conf

    conf = spark_conf(load_settings(config, env={}))
    session = spark.newSession()
    for key, value in conf.items():
        if key.startswith("spark.sql.catalog.") or key in (
                "spark.sql.defaultCatalog", "spark.sluice.table_format"):
            session.conf.set(key, value)
    return session
