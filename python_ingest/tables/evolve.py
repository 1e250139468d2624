"""Column type widening: a table's column takes the wider type new rows bring, without loss.

A source column widened (``decimal(8,2)`` -> ``decimal(12,2)``, ``int`` -> ``bigint``,
``float`` -> ``double``) reaches sluice as a new schema version; every table the job writes
(raw, staging, valid, lake; names.py) must then hold the wider values. ``ensure_table``
(formats.py), the batch path's lake upsert (steps/batch.py) and the dbt materializations
(``adapter.sluice_widen``) call ``widen`` with the columns they are about to write; it
compares them with the table's schema already in hand and changes a column's type only when
they differ, so a batch whose schema did not change costs nothing more (no Spark job). The
history (``lake.<model>__history``, steps/history/writer.py) takes its types from the lake's
widened by the batch's valid rows (``wider_columns``: on the batch path it is written before
the lake's upsert widens the lake) and is widened the same way before its commit.

What widens (``widening``): integers upward (tinyint < smallint < int < bigint), float to
double, a decimal to one with as many digits before the point and at least as many after
(Iceberg: the same scale only, its rule). Anything else, a narrowing included, stops the job
with ``ColumnTypeChangeError`` naming the table, the column, both types and what to do;
nothing is truncated or cast down.

How: Iceberg's ``ALTER TABLE .. ALTER COLUMN .. TYPE`` (a metadata commit). Hudi's Spark SQL
refuses a type change unless schema-on-read evolution is on (``hoodie.schema.on.read.enable``):
it is set for the ALTER only, which commits the new schema (an instant without data or
checkpoint), after the log files of a merge-on-read table are compacted (``_compact_logs``);
files written before keep their narrower type and Hudi's reader widens them when read (its
parquet reader casts a file's int, float, decimal to the table's type). A failed
write still pending is rolled back first by an empty write (an ALTER committed after it would
make Hudi refuse the rollback, tables/hudi.py). A crash after the ALTER and before the data
commit leaves a wider table and the checkpoint where it was: the next run writes the same
rows, and finds nothing left to widen.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from python_ingest.config.table_formats import DEFAULT_FORMAT, format_named, session_format
from python_ingest.exceptions import ColumnTypeChangeError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

INTEGERS = ("tinyint", "smallint", "int", "bigint")
FLOATS = ("float", "double")
SCHEMA_ON_READ = "hoodie.schema.on.read.enable"
COMMIT_PREFIX = "sluice."  # session settings Hudi writes into a commit's metadata (hudi.py)
# Hudi's own columns (its delete flag, _hoodie_is_deleted, is the lake's and written)
HUDI_META = ("_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key",
             "_hoodie_partition_path", "_hoodie_file_name")
_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")
# the column types last seen per table (the batch path's lake): a batch with the same types
# compares dicts, no catalog call
_known: dict[str, dict[str, str]] = {}


def _decimal(kind: str) -> tuple[int, int] | None:
    found = _DECIMAL.fullmatch(kind.replace(" ", ""))
    return (int(found[1]), int(found[2])) if found else None


def widening(old: str, new: str, table_format: str = DEFAULT_FORMAT) -> str | None:
    """Why ``old`` cannot widen to ``new`` without loss (None: it can, or they are equal).
    Types as Spark's ``simpleString`` spells them."""
    old, new = old.lower().replace(" ", ""), new.lower().replace(" ", "")
    if old == new:
        return None
    if old in INTEGERS and new in INTEGERS:
        return None if INTEGERS.index(new) > INTEGERS.index(old) else "a narrower integer"
    if old in FLOATS and new in FLOATS:
        return None if new == "double" else "a narrower floating point type"
    was, now = _decimal(old), _decimal(new)
    if was and now:
        (p, s), (p2, s2) = was, now
        if s2 < s:
            return f"fewer digits after the point ({s2} instead of {s}): values would be rounded"
        if p2 - s2 < p - s:
            return (f"fewer digits before the point ({p2 - s2} instead of {p - s}): large values "
                    "would not fit")
        if s2 != s and not format_named(table_format).rescales_decimals:
            return "a decimal of another scale (Iceberg widens a decimal's precision only)"
        return None
    return "not a widening sluice can apply without loss"


def plan(table: str, current: dict[str, str], columns: Iterable[tuple[str, str]],
         table_format: str = DEFAULT_FORMAT) -> list[tuple[str, str, str]]:
    """The columns of ``table`` to widen, as (name, old type, new type), from its columns'
    ``current`` types ({lowercase name: type}) and the ``columns`` about to be written
    (columns it lacks are left to ``ensure_table``); a ColumnTypeChangeError for the first
    column whose new type is not a widening of its old one."""
    changes = []
    for name, kind in columns:
        old = current.get(name.lower())
        if old is None or old.lower().replace(" ", "") == kind.lower().replace(" ", ""):
            continue
        why = widening(old, kind, table_format)
        if why is not None:
            raise ColumnTypeChangeError(
                f"table {table}: column {name} is {old} in the table but {kind} in the new "
                f"rows ({why}). sluice changes a column's type only to a wider one it can hold "
                "every value of (integers upward, float to double, a decimal of more digits), "
                "never by truncating; the job stopped before writing and its checkpoint did not "
                "move. To take the new type, start the job's tables over: drop them and "
                "re-bootstrap the source table (`sluice bootstrap <source> <db.table>`, "
                "docs/binlog-tap.md, docs/postgres-source.md); or keep the old type by casting "
                "the column in the job's converter (docs/write-a-converter.md)")
        changes.append((name, old, kind))
    return changes


def wider_columns(columns: Iterable[tuple[str, str]], incoming: Mapping[str, str],
                  table_format: str = DEFAULT_FORMAT) -> list[tuple[str, str]]:
    """``columns`` (name, type) with the types ``incoming`` ({name: type}, any case) widen
    them to: a table derived from another (the history from the lake, history_writer.py)
    takes the wider type of the rows about to be written before the table it derives from
    does (the batch path writes the history before the lake's upsert widens the lake). A
    type ``incoming`` does not widen to is kept: the table the rows go to refuses it."""
    wider = {n.lower(): t for n, t in incoming.items()}
    out = []
    for name, kind in columns:
        new = wider.get(name.lower())
        if new is not None and new.replace(" ", "") != kind.replace(" ", "") \
                and widening(kind, new, table_format) is None:
            kind = new
        out.append((name, kind))
    return out


def widen(spark: SparkSession, table: str, columns: Iterable[tuple[str, str]],
          schema: StructType | None = None) -> list[tuple[str, str, str]]:
    """Widen the columns of ``table`` that ``columns`` (name, Spark type) bring wider; its
    ``schema`` when the caller has it (else the catalog's, a lookup, no Spark job). Returns
    what it changed."""
    columns = list(columns)
    if schema is None:
        schema = spark.table(table).schema
    current = {f.name.lower(): f.dataType.simpleString() for f in schema.fields}
    spec = session_format(spark)
    changes = plan(table, current, columns, spec.name)
    if changes:
        _alter(spark, table, changes, spec.alters_by_schema_on_read)
        current.update({n.lower(): t for n, _, t in changes})
    _known[table] = current
    return changes


def widen_known(spark: SparkSession, table: str, columns: Iterable[tuple[str, str]]) -> None:
    """``widen`` for a table written batch after batch by this process (the batch path's
    lake): the types it saw last are compared first, the catalog is read only when ``columns``
    differ from them (or on the table's first batch here)."""
    columns = list(columns)
    known = _known.get(table)
    if known is not None and all(known.get(n.lower(), t).replace(" ", "") == t.replace(" ", "")
                                 for n, t in columns):
        return
    if known is not None:  # changed since: maybe by another process (a plain `dbt run`)
        spark.catalog.refreshTable(table)
    widen(spark, table, columns)


def forget(table: str) -> None:
    """Drop what this process knows of ``table``'s types (it was dropped or re-created)."""
    _known.pop(table, None)


def _alter(spark: SparkSession, table: str, changes: list[tuple[str, str, str]],
           schema_on_read: bool) -> None:
    if schema_on_read:  # Hudi
        # a checkpoint the session carries for the step's own commit (formats.committing:
        # the dbt merge) must not ride in these commits: a crash before the step's commit
        # would leave its batch looking done
        held = {str(r[0]): str(r[1]) for r in spark.sql("set").collect()
                if str(r[0]).startswith(COMMIT_PREFIX)}
        for key in held:
            spark.conf.unset(key)
        before = spark.conf.get(SCHEMA_ON_READ, None)
        try:
            _settle_failed_write(spark, table)
            _compact_logs(spark, table)
            spark.conf.set(SCHEMA_ON_READ, "true")
            for name, old, new in changes:
                spark.sql(f"alter table {table} alter column `{name}` type {new}")
                log.warning("table %s: column %s widened from %s to %s", table, name, old, new)
        finally:
            if before is None:
                spark.conf.unset(SCHEMA_ON_READ)
            else:
                spark.conf.set(SCHEMA_ON_READ, before)
            for key, value in held.items():
                spark.conf.set(key, value)
    else:
        for name, old, new in changes:
            spark.sql(f"alter table {table} alter column `{name}` type {new}")
            log.warning("table %s: column %s widened from %s to %s", table, name, old, new)
    spark.catalog.refreshTable(table)


def _compact_logs(spark: SparkSession, table: str) -> None:
    """A merge-on-read table's log files compacted into base files: Hudi reads a log block
    with the block's own Avro schema resolved to the table's, and Avro cannot resolve a
    decimal's fixed bytes to a wider decimal (a base file's parquet it can). Copy-on-write
    tables have no log files."""
    properties = {r[0]: r[1] for r in spark.sql(f"show tblproperties {table}").collect()}
    if properties.get("type", "cow").lower() != "mor":  # Hudi's SQL tables say their type
        return
    spark.sql(f"call run_compaction(op => 'scheduleAndExecute', table => '{table}', "
              "options => 'hoodie.compact.inline.max.delta.commits=1')").collect()
    log.info("table %s: log files compacted before a column's type widens", table)


def _settle_failed_write(spark: SparkSession, table: str) -> None:
    """An empty write: Hudi rolls back a failed write still pending before it, which it
    refuses once a later instant (the ALTER) has completed."""
    names = ", ".join(f"`{f.name}`" for f in spark.table(table).schema.fields
                      if f.name not in HUDI_META)
    spark.sql(f"insert into {table} ({names}) select {names} from {table} where false")
