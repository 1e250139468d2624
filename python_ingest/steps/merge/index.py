"""The merge's global index: ``meta.<job>__index``, each row key's state (docs/index.md).

One entry per row key and merged batch that changed it: the key, its ref key after the batch,
whether it is deleted, the batch, when. The merge reads the entries of its batch's keys (a
narrow scan, no lake row) to decide insert, update, delete or nothing and to apply the
out-of-order guard; it reads lake rows only for the keys a partial update changes. A
merge by SQL appends its entries before its lake MERGE, in a commit carrying the merge checkpoint
(``sluice.merge.batch_id``), and reads only entries of earlier batches: a rerun after a crash
between the two commits computes the same change set and skips the index
(``pipeline.pending_merges``).

The batch path (steps/batch.py) defers a small batch's entries: they ride in the metadata of
its lake commit (``sluice.index.entries``), the only commit of its merge, and are kept in memory
(steps/merge/index_cache.py); ``catch_up`` writes the entries of several such batches to the
index in one commit, every ``CATCH_UP_BATCHES`` batches and before anything reads the index
table (the lake model's SQL, the step tables' merge, index compaction, dispersal's deletes). A
kill loses nothing: the lake's commits still carry them, and the next run catches up first.

Services (``steps/services.py``): ``compact_index`` rewrites the index to one entry per key,
dropping delete markers older than the job's ``tombstone_retention``; ``build_index`` builds
it in bulk from the lake and the tombstone table (a lake that predates the index, or an index
dropped to be rebuilt).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import time
import zlib
from typing import TYPE_CHECKING

from python_ingest.config.table_formats import session_format
from python_ingest.runtime.catalog import drop_scratch
from python_ingest.tables.checkpoints import property_name, step_checkpoint, step_properties
from python_ingest.tables.formats import (
    append,
    commit_properties,
    committing,
    ensure_table,
    table_exists,
)
from python_ingest.tables.names import JobTables

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

MERGE_STEP = "merge"
INDEX_COLUMNS = (("_row_key", "string"), ("_ref_key", "bigint"), ("_is_deleted", "boolean"),
                 ("_batch_id", "bigint"), ("_indexed_at", "timestamp"))
# A small batch's entries ride in its lake commit's metadata (the batch path's one commit per
# batch); catch_up copies them into the index table later, several batches in one commit
ENTRIES_PROPERTY = "sluice.index.entries"
# batches the lake may be ahead of the index table before the batch path writes them to it
CATCH_UP_BATCHES = int(os.environ.get("SLUICE_INDEX_CATCH_UP_BATCHES", "10"))

Entry = tuple[str, int, bool]  # row key, ref key, deleted


def entries_property(entries: list[Entry]) -> dict[str, str]:
    """A lake commit's property carrying a batch's index entries (compressed JSON)."""
    text = json.dumps([[key, ref, deleted] for key, ref, deleted in entries],
                      separators=(",", ":"))
    return {ENTRIES_PROPERTY: base64.b64encode(zlib.compress(text.encode(), 6)).decode()}


def carried_entries(value: str) -> list[Entry]:
    """The entries ``entries_property`` wrote."""
    return [(str(k), int(r), bool(d))
            for k, r, d in json.loads(zlib.decompress(base64.b64decode(value)))]


def catch_up(spark: SparkSession, tables: JobTables) -> bool:
    """Bring the index table up to the lake: the entries of the batches the lake committed
    with their entries in its commit metadata (the batch path's small batches), and which the
    index does not have yet, in one commit carrying the lake's merge checkpoint. Exact after
    a kill at any point: the lake's commits hold them until they are written. Whether it
    committed (not when the index was up to date, or behind only by fewer than
    ``CATCH_UP_BATCHES`` batches that changed nothing)."""
    if tables.lake is None or not table_exists(spark, tables.index) \
            or not table_exists(spark, tables.lake):
        return False
    index_done = step_checkpoint(spark, tables.index, MERGE_STEP)
    lake_done = step_checkpoint(spark, tables.lake, MERGE_STEP)
    if lake_done <= index_done:
        return False
    key, found = property_name(MERGE_STEP), []
    for properties in commit_properties(spark, tables.lake):
        if key not in properties:
            continue  # compaction, cleaning
        batch_id = int(properties[key])
        if batch_id <= index_done:
            break
        if ENTRIES_PROPERTY in properties:
            found += [(k, r, d, batch_id) for k, r, d in
                      carried_entries(properties[ENTRIES_PROPERTY])]
    if not found and lake_done - index_done < CATCH_UP_BATCHES:
        return False
    from pyspark.sql import functions as F

    schema = "_row_key string, _ref_key bigint, _is_deleted boolean, _batch_id bigint"
    rows = spark.createDataFrame(found, schema).withColumn("_indexed_at",
                                                           F.current_timestamp())
    append(rows, tables.index, step_properties(MERGE_STEP, lake_done))
    log.info("index %s caught up with %s: %d entries of batches %d to %d", tables.index,
             tables.lake, len(found), index_done + 1, lake_done)
    return True


def ensure_index(spark: SparkSession, tables: JobTables) -> None:
    """Create the job's index, built in bulk from its lake table when that holds rows."""
    if table_exists(spark, tables.index):
        return
    if tables.lake is None or not table_exists(spark, tables.lake):
        ensure_table(spark, tables.index, INDEX_COLUMNS)
        return
    build_index(spark, tables)


def build_index(spark: SparkSession, tables: JobTables) -> int:
    """Write the index from the lake table (every row, ``_is_deleted`` ones too) and the
    tombstone table (deletes up to the lake's merge checkpoint), in one commit carrying that
    checkpoint; replaces an index there was. Returns the number of entries."""
    assert tables.lake is not None
    start = time.monotonic()
    done = step_checkpoint(spark, tables.lake, MERGE_STEP)
    deletes = ""
    if table_exists(spark, tables.tombstones):
        deletes = f"""
        union all
        select _row_key, max_by(_ref_key, _batch_id), true, max(_batch_id), current_timestamp()
        from {tables.tombstones}
        where _batch_id <= {done}
        group by _row_key"""
    entries = spark.sql(f"""
        select _row_key, _ref_key, coalesce(_is_deleted, false) as _is_deleted,
               _batch_id, current_timestamp() as _indexed_at
        from {tables.lake}
        {deletes}""")
    if table_exists(spark, tables.index):
        _overwrite(spark, tables.index, entries, done)
    else:
        ensure_table(spark, tables.index, INDEX_COLUMNS)
        append(entries, tables.index, step_properties(MERGE_STEP, done))
    count = spark.table(tables.index).count()
    log.info("built %s from %s: %d entries (merge checkpoint %d) in %.1f s", tables.index,
             tables.lake, count, done, time.monotonic() - start)
    return count


def compact_index(spark: SparkSession, tables: JobTables, retention_s: int) -> tuple[int, int]:
    """Rewrite the index to each key's newest entry, without delete markers older than
    ``retention_s``; (entries before, entries after). One overwrite commit carrying the
    merge checkpoint the index had, so a rerun's skip decisions do not change."""
    if not table_exists(spark, tables.index):
        return 0, 0
    catch_up(spark, tables)  # the entries only the lake's commits hold yet
    done = step_checkpoint(spark, tables.index, MERGE_STEP)
    before = spark.table(tables.index).count()
    latest = spark.sql(f"""
        select _row_key, latest._ref_key, latest._is_deleted, latest._batch_id,
               latest._indexed_at
        from (
            select _row_key, max_by(struct(_ref_key, _is_deleted, _batch_id, _indexed_at),
                                    _batch_id) as latest
            from {tables.index}
            group by _row_key
        )
        where not (latest._is_deleted
                   and latest._indexed_at < current_timestamp() - make_dt_interval(0, 0, 0,
                                                                                   {retention_s}))
    """)
    _overwrite(spark, tables.index, latest, done)
    after = spark.table(tables.index).count()
    log.info("compacted %s: %d entries → %d (delete markers kept %d s)", tables.index,
             before, after, retention_s)
    return before, after


def _overwrite(spark: SparkSession, table: str, rows: DataFrame, done: int) -> None:
    """Replace ``table``'s rows by ``rows``, in one commit carrying the merge checkpoint
    ``done``. The rows are computed first into a scratch table: the overwrite reads nothing
    of the table it replaces."""
    scratch = "meta.sluice_index_rewrite"
    rows.createOrReplaceTempView("sluice_index_rewrite")
    drop_scratch(spark, scratch)
    using = session_format(spark).scratch_using
    spark.sql(f"create table {scratch} using {using} as select * from sluice_index_rewrite")
    columns = ", ".join(name for name, _ in INDEX_COLUMNS)
    committing(spark, step_properties(MERGE_STEP, done), lambda: spark.sql(
        f"insert overwrite table {table} select {columns} from {scratch}"))
    drop_scratch(spark, scratch)
