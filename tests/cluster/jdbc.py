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


def reader(spark: Any, catalog: dict[str, str]) -> Any:
    """A session of the test process that reads the JDBC catalog's tables by their names (a
    JDBC catalog's rows carry its name: the reader's catalog has the runner's)."""
    session = spark.newSession()
    prefix = f"spark.sql.catalog.{catalog['name']}"
    for key, value in {prefix: "org.apache.iceberg.spark.SparkCatalog", f"{prefix}.type": "jdbc",
                       f"{prefix}.uri": f"jdbc:{catalog['uri']}",
                       f"{prefix}.jdbc.user": catalog["user"],
                       f"{prefix}.warehouse": catalog["warehouse"],
                       f"{prefix}.cache-enabled": "false",
                       "spark.sql.defaultCatalog": catalog["name"],
                       "spark.sluice.table_format": "iceberg"}.items():
        session.conf.set(key, value)
    return session
