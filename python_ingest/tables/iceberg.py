"""Iceberg tables sluice writes: existence, creation and additive schema evolution."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

TABLE_PROPERTIES = {
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
}


def table_exists(spark: SparkSession, table: str) -> bool:
    """Whether the catalog knows ``table`` (a catalog call, no Spark job)."""
    return bool(spark.catalog.tableExists(table))


def ensure_table(spark: SparkSession, table: str, columns: Iterable[tuple[str, str]]) -> None:
    """Create the table, or add columns that the schema gained since (never drops any)."""
    columns = list(columns)
    if not table_exists(spark, table):
        ddl = ", ".join(f"`{n}` {t}" for n, t in columns)
        props = ", ".join(f"'{k}'='{v}'" for k, v in TABLE_PROPERTIES.items())
        spark.sql(f"create table if not exists {table} ({ddl}) using iceberg "
                  f"tblproperties ({props})")
        log.info("created table %s", table)
        return
    existing = {f.name for f in spark.table(table).schema.fields}
    for name, spark_type in columns:
        if name not in existing:
            spark.sql(f"alter table {table} add column `{name}` {spark_type}")
            log.info("added column %s %s to %s", name, spark_type, table)
