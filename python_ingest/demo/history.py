"""The demo's history table: what `sluice demo` shows of ``lake.trips__history`` (the demo's
lake model has ``history=true``; docs/history.md) after its rounds: how many versions, and the
newest batch's changes as `sluice changes trips --since <batch>` lists them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from python_ingest.feed.changes import Point, history_name, read_changes
from python_ingest.tables.formats import table_exists

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from python_ingest.tables.names import JobTables

SHOWN = 6  # changes printed as examples


def show_history(spark: SparkSession, tables: JobTables,
                 out: Callable[[str], None] = print) -> bool:
    """Print the history's size and the newest batch's changes; False when the job keeps no
    history (nothing printed)."""
    table = history_name(tables)
    if table is None or not table_exists(spark, table):
        return False
    row = spark.sql(f"select count(*), count(distinct _row_key), count_if(_is_current), "
                    f"max(_batch_id) from {table}").collect()[0]
    versions, keys, current, newest = int(row[0]), int(row[1]), int(row[2]), row[3]
    out(f"\nhistory: {table}: {versions} versions of {keys} trips ({current} current), every "
        "change a version, valid from its source commit time (docs/history.md)")
    if newest is None:
        return True
    counts = {"insert": 0, "update": 0, "delete": 0}
    examples: list[str] = []
    for change in read_changes(spark, table, Point(batch=int(newest))):
        counts[change.op] = counts.get(change.op, 0) + 1
        if len(examples) < SHOWN:
            examples.append(f"  {change.op:<7} trip {change.key:<8} {change.summary()[:90]}")
    out(f"  what batch {newest} changed: {counts['insert']} inserts, {counts['update']} updates "
        f"(before and after images), {counts['delete']} deletes, e.g.")
    for line in examples:
        out(line)
    out(f"  all of it: sluice changes {tables.job} --since {newest} [--json]")
    return True
