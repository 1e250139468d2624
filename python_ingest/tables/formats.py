"""The table format behind every sluice table: Apache Hudi (default) or Apache Iceberg.

Ingest, fork, runner and CLI call the functions here and never name a format; the session
says which one it writes (``config.table_formats.session_format``, the one accessor: set by
``runtime.session`` from ``table_format`` in sluice.yml), and the registry there
(``FORMATS``) names each format's implementation of one small interface, ``TableFormat``, and
what else differs (its DDL's ``using`` clause, widening rule, history writes...):

- ``exists`` / ``ensure_table``: a table by name, created or grown by new columns (append-only
  tables: raw, errors, staging, tombstones, runs);
- ``append``: rows and commit properties (checkpoints) in ONE commit;
- ``commit_properties``: the properties of the commits in the table's current history, newest
  first (where checkpoints are read back from);
- ``committing``: run SQL (dbt's merge) so that its commits carry properties;
- ``commit_times``: when the table's commits happened (the dashboard's step timings);
- ``maintain``: the table services, now (``sluice maintain``, and after every N merges);
- ``compact_files``: an append-only table's small files (one or more per batch) rewritten into
  few, sorted by batch (every N merges), so that reading a batch costs what the batch holds;
- ``position`` / ``read_changes``: where the table's history ends now (Hudi: the newest
  completed commit's completion time; Iceberg: the current snapshot id) and the rows written
  after one such position (dispersal, ``sinks/changes.py``).

docs/formats.md puts the two side by side; docs/table-formats.md says how to add a third.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from importlib import import_module
from typing import TYPE_CHECKING, Protocol, TypeVar

from python_ingest.config.services import ServicesConfig
from python_ingest.config.table_formats import FormatSpec, format_named, session_format
from python_ingest.tables.shared import shared_write

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

T = TypeVar("T")


class TableFormat(Protocol):
    """What sluice needs of a table format."""

    name: str

    def create_history(self, spark: SparkSession, table: str, ddl: str) -> None: ...

    def exists(self, spark: SparkSession, table: str) -> bool: ...

    def refresh_schema(self, spark: SparkSession, table: str) -> None: ...

    def ensure_table(self, spark: SparkSession, table: str,
                     columns: Iterable[tuple[str, str]]) -> None: ...

    def append(self, df: DataFrame, table: str, properties: Mapping[str, str]) -> None: ...

    def commit_properties(self, spark: SparkSession,
                          table: str) -> Iterator[Mapping[str, str]]: ...

    def history_complete(self, spark: SparkSession, table: str) -> bool: ...

    def committing(self, spark: SparkSession, properties: Mapping[str, str],
                   action: Callable[[], T]) -> T: ...

    def commit_times(self, spark: SparkSession, table: str) -> list[datetime]: ...

    def payload_columns(self, spark: SparkSession, table: str) -> list[str]: ...

    def maintain(self, spark: SparkSession, table: str, merged: bool,
                 keep_commits: int, orphans: bool = False) -> list[str]: ...

    def compact_files(self, spark: SparkSession, table: str) -> None: ...

    def live_files(self, spark: SparkSession, table: str) -> int: ...

    def position(self, spark: SparkSession, table: str) -> str | None: ...

    def read_changes(self, spark: SparkSession, table: str, since: str | None,
                     until: str) -> DataFrame: ...


def table_format(spark: SparkSession) -> TableFormat:
    """The format this session writes (the default for a session sluice did not configure)."""
    return implementation(session_format(spark))


def implementation(spec: FormatSpec | str) -> TableFormat:
    """The ``TableFormat`` of a registered format (config/table_formats.py ``FORMATS``),
    imported when first asked for."""
    if isinstance(spec, str):
        spec = format_named(spec)
    module, _, attribute = spec.implementation.partition(":")
    found: TableFormat = getattr(import_module(module), attribute)
    return found


def table_exists(spark: SparkSession, table: str) -> bool:
    """Whether ``table`` exists (for Hudi: also when another process created it)."""
    return table_format(spark).exists(spark, table)


def name_tables(spark: SparkSession, tables: Iterable[str]) -> None:
    """Make those of ``tables`` that exist known by name to this process's session before
    SQL or dbt reads them: a Hudi table another process created is registered (a process
    names only the shared tables at start: ``runtime.catalog.register_tables``)."""
    for table in tables:
        table_exists(spark, table)


def refresh_schemas(spark: SparkSession, tables: Iterable[str]) -> None:
    """This process's catalog entries of ``tables`` brought up to their schemas on disk: called
    when a job's lease was held by another process since this one last released it (a Hudi
    table's entry is this process's own, tables/hudi.py ``refresh_schema``; an Iceberg
    catalog reads each table's metadata from the warehouse)."""
    fmt = table_format(spark)
    for table in tables:
        fmt.refresh_schema(spark, table)


def ensure_table(spark: SparkSession, table: str, columns: Iterable[tuple[str, str]]) -> None:
    """Create the table, or add the columns it gained since (never drops any)."""
    table_format(spark).ensure_table(spark, table, columns)


def append(df: DataFrame, table: str, properties: Mapping[str, str] | None = None) -> None:
    """Append ``df`` to ``table`` with ``properties`` in the same commit (a shared table on
    S3 under sluice's lock: tables/shared.py)."""
    with shared_write(df.sparkSession, table):
        table_format(df.sparkSession).append(df, table, properties or {})


def committing(spark: SparkSession, properties: Mapping[str, str], action: Callable[[], T]) -> T:
    """Run ``action`` (SQL statements, a dbt run) so that its commits carry ``properties``."""
    return table_format(spark).committing(spark, properties, action)


def commit_properties(spark: SparkSession, table: str) -> Iterator[Mapping[str, str]]:
    """The table's commit properties in its current history, newest first."""
    return table_format(spark).commit_properties(spark, table)


def history_complete(spark: SparkSession, table: str) -> bool:
    """Whether ``commit_properties`` reaches back to the table's first commit (Iceberg: no
    expired ancestor; Hudi: always, archived commits included)."""
    return table_format(spark).history_complete(spark, table)


def commit_times(spark: SparkSession, table: str) -> list[datetime]:
    """When the table's commits happened (naive local times, as pyspark returns timestamps)."""
    return table_format(spark).commit_times(spark, table)


def read_table(spark: SparkSession, table: str) -> DataFrame:
    """The table's rows with its own columns only (no format bookkeeping columns)."""
    columns = table_format(spark).payload_columns(spark, table)
    return spark.table(table).select(*[f"`{c}`" for c in columns])


def maintain(spark: SparkSession, table: str, merged: bool,
             keep_commits: int = ServicesConfig.keep_commits, orphans: bool = False) -> list[str]:
    """Run the format's table services on ``table`` now (``merged``: a lake table, changed by
    merges rather than appends; cleaning keeps the files of the newest ``keep_commits``
    commits; ``orphans``: also remove files no commit references, a listing of the whole
    table); returns what was done, in words."""
    return table_format(spark).maintain(spark, table, merged, keep_commits, orphans)


# an append-only table is compacted once a read of it opens this many files or more
SMALL_FILES_MIN = 3


def live_files(spark: SparkSession, table: str) -> int:
    """How many data files a read of ``table`` opens now."""
    return table_format(spark).live_files(spark, table)


def compact_files(spark: SparkSession, table: str) -> tuple[int, int]:
    """Rewrite an append-only table's small files (one or more per batch: raw, staging,
    valid, error tables) into few, sorted by ``_batch_id``, when a read opens at least
    ``SMALL_FILES_MIN`` of them (Hudi: clustering, one replace commit; Iceberg: a sorted
    ``rewrite_data_files``). Rows, commits and checkpoints stay as they are; a read of the
    newest batches then opens one file instead of one per batch. Files before and after."""
    before = live_files(spark, table)
    if before < SMALL_FILES_MIN:
        return before, before
    table_format(spark).compact_files(spark, table)
    return before, live_files(spark, table)


def position(spark: SparkSession, table: str) -> str | None:
    """Where ``table``'s history ends now (None: no commit yet): a token ``read_changes``
    takes (Hudi: the newest completed commit's completion time; Iceberg: the snapshot id)."""
    return table_format(spark).position(spark, table)


def read_changes(spark: SparkSession, table: str, since: str | None, until: str) -> DataFrame:
    """The rows of ``table`` written after position ``since`` up to ``until``, with the table's
    own columns (``since`` None: every row as of ``until``). A superset is allowed (Iceberg
    cannot read merge-on-read commits incrementally and returns the table as of ``until``):
    callers narrow it by a column the writes set (the lake's ``_batch_id``)."""
    columns = table_format(spark).payload_columns(spark, table)
    df = table_format(spark).read_changes(spark, table, since, until)
    return df.select(*[f"`{c}`" for c in columns])
