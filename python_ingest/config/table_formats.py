"""The table formats sluice writes: one default, one registry, one accessor (#59).

Every table sluice and dbt write is in one format, the project's ``table_format`` (Hudi by
default) or a job's own. A Spark session says which one it writes by one setting,
``FORMAT_CONF``, which ``runtime.session`` sets and which nothing but ``session_format`` here
reads back. Each format is one ``FormatSpec`` in ``FORMATS``: its name, the module and object
implementing ``tables.formats.TableFormat`` (tables/hudi.py, tables/iceberg.py), and what its
callers below the tables layer need to know of it (its DDL's ``using`` clause, its catalog,
its widening rule, its record keys...): so a caller asks the spec, never compares a format's
name. docs/table-formats.md says how to add a format.

This module lives in ``config`` (the lowest layer that knows the settings) so that ``runtime``
and ``changelog``, which may not import ``tables``, read the same registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from python_ingest.exceptions import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FORMAT_CONF = "spark.sluice.table_format"  # the format a session writes (runtime/session.py)
DEFAULT_FORMAT = "hudi"  # of a project that names none, and of a session sluice did not set


@dataclass(frozen=True)
class FormatSpec:
    """One table format: where it is implemented and how it differs, as data."""

    name: str  # as sluice.yml spells it (``table_format: <name>``)
    title: str  # as messages spell it
    marker: str  # the entry a table's folder holds when the table is in this format
    implementation: str  # "module:attribute" of its tables.formats.TableFormat
    using: str  # the ``using`` clause of its tables' DDL (the history table, dbt's models)
    scratch_using: str  # the ``using`` clause of a scratch table (the index rewrite's)
    session_catalog: bool  # its tables live in Spark's session catalog (else catalog.name)
    rescales_decimals: bool  # a decimal column widens to another scale, not precision only
    alters_by_schema_on_read: bool  # a type change needs Hudi's schema-on-read ALTER path
    refuses_empty_keys: bool  # an empty record key is refused: _row_key never empty
    upserts_by_insert: bool  # an INSERT upserts by key (the history writes without MERGE)
    bucket_lakes: bool  # its lakes take the batch path's upsert into hash buckets
    lake_table: tuple[tuple[str, str], ...]  # a new lake's own table properties

    def default_catalog(self, iceberg_catalog: str) -> str:
        """``spark.sql.defaultCatalog`` of a session writing this format."""
        return "spark_catalog" if self.session_catalog else iceberg_catalog


FORMATS: dict[str, FormatSpec] = {
    "hudi": FormatSpec(
        name="hudi", title="Hudi", marker=".hoodie",
        implementation="python_ingest.tables.hudi:HUDI", using="hudi",
        scratch_using="parquet", session_catalog=True, rescales_decimals=True,
        alters_by_schema_on_read=True, refuses_empty_keys=True, upserts_by_insert=True,
        bucket_lakes=True,
        # merge-on-read keyed by _row_key, ordered by _ref_key; the change set already applied
        # the out-of-order guard and force updates, so the latest commit wins (docs/formats.md)
        lake_table=(("type", "mor"), ("primaryKey", "_row_key"),
                    ("preCombineField", "_ref_key"),
                    ("hoodie.record.merge.mode", "COMMIT_TIME_ORDERING"))),
    "iceberg": FormatSpec(
        name="iceberg", title="Iceberg", marker="metadata",
        implementation="python_ingest.tables.iceberg:ICEBERG", using="iceberg",
        scratch_using="iceberg", session_catalog=False, rescales_decimals=False,
        alters_by_schema_on_read=False, refuses_empty_keys=False, upserts_by_insert=False,
        bucket_lakes=False,
        lake_table=(("format-version", "2"), ("write.delete.mode", "merge-on-read"),
                    ("write.update.mode", "merge-on-read"), ("write.merge.mode", "merge-on-read"))),
}
TABLE_FORMATS = tuple(FORMATS)  # the names sluice.yml accepts (docs/formats.md)


def format_named(name: str | None, field_name: str = "table_format") -> FormatSpec:
    """The spec of the format called ``name`` (None: the default); an unknown name is a
    ConfigError naming the known ones."""
    key = DEFAULT_FORMAT if name is None else str(name).strip().lower()
    found = FORMATS.get(key)
    if found is None:
        raise ConfigError(field_name, f"unknown table format {name!r}",
                          f"known table formats: {', '.join(TABLE_FORMATS)}")
    return found


def session_format(spark: SparkSession) -> FormatSpec:
    """The format ``spark`` writes (a job's own for a job's session: runtime.session
    ``for_job``). The one reader of ``FORMAT_CONF``."""
    return format_named(spark.conf.get(FORMAT_CONF, DEFAULT_FORMAT), FORMAT_CONF)


def project_format(spark: SparkSession) -> FormatSpec:
    """The format the application's SparkContext was started with: the project's, whatever
    format a session of it writes now (meta.runs lives in it)."""
    return format_named(spark.sparkContext.getConf().get(FORMAT_CONF, DEFAULT_FORMAT),
                        FORMAT_CONF)
