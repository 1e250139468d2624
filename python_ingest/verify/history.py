"""``sluice verify JOB --history``: a job's history table agrees with its lake, row for row.

The history's current versions (``_is_current``, not a delete version) must be exactly the
lake's live rows: the same keys, each once, with the same values. Issue #52 promises it after
every batch (the history is written in the same batch as the lake, from the same changes); this
check proves it on a real table, without a source database: both sides are Spark tables, so
one full outer join on the row key does it.

Compared are the payload columns (not sluice's ``_`` columns: the lake's ``_batch_id`` and
``_ref_key`` are those of the row's newest change, the version's those of the change that
opened it, and a change only in untracked columns, ``track_history_on``, updates the current
version in place without opening one).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from python_ingest.feed.changes import image_columns

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SHOW = 1000  # differing keys fetched to the driver, at most


@dataclass(frozen=True)
class CurrentDifference:
    """A key on which the history's current version and the lake's row disagree."""

    key: str
    kind: str  # missing (in the history) | extra (only in the history) | twice | changed
    columns: tuple[str, ...] = ()  # changed: the columns that differ


@dataclass
class HistoryCheck:
    """The outcome of one check of a job's current versions against its lake."""

    job: str
    lake_table: str
    history_table: str
    lake_rows: int = 0
    current_rows: int = 0
    differing_keys: int = 0  # all of them; ``differences`` holds at most SHOW
    differences: list[CurrentDifference] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def equal(self) -> bool:
        return self.differing_keys == 0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "equal": self.equal}


def check_current(spark: SparkSession, job: str, lake: str, history: str) -> HistoryCheck:
    """Compare the history's current versions with the lake's live rows (one Spark join)."""
    started = time.monotonic()
    lake_columns = image_columns([f.name for f in spark.table(lake).schema.fields])
    history_columns = set(image_columns([f.name for f in spark.table(history).schema.fields]))
    columns = [c for c in lake_columns if c in history_columns]
    image = "named_struct(" + ", ".join(f"'{c}', `{c}`" for c in columns) + ")"
    spark.sql(f"""
        with

        lake_rows as (

            select _row_key, {image} as image
            from {lake}
            where not coalesce(_is_deleted, false)

        ),

        current_versions as (

            select _row_key, {image} as image, count(*) over (partition by _row_key) as copies
            from {history}
            where _is_current and not coalesce(_is_deleted, false)

        ),

        compared as (

            select
                coalesce(l._row_key, c._row_key) as key,
                case
                    when c._row_key is null then 'missing'
                    when l._row_key is null then 'extra'
                    when c.copies > 1 then 'twice'
                    when not (l.image <=> c.image) then 'changed'
                end as kind,
                l.image as lake_image,
                c.image as history_image,
                l._row_key is not null as in_lake,
                c._row_key is not null as in_history
            from lake_rows l
            full outer join current_versions c on l._row_key = c._row_key

        )

        select * from compared
    """).createOrReplaceTempView("sluice_history_check")
    counts = spark.sql("""
        select count_if(in_lake), count_if(in_history), count(distinct key) filter
               (where kind is not null)
        from sluice_history_check""").collect()[0]
    result = HistoryCheck(job, lake, history, lake_rows=int(counts[0]),
                          current_rows=int(counts[1]), differing_keys=int(counts[2]))
    if result.differing_keys:
        rows = spark.sql(f"""
            select key, first(kind) as kind, first(lake_image) as lake_image,
                   first(history_image) as history_image
            from sluice_history_check where kind is not null
            group by key order by key limit {SHOW}""").collect()
        for row in rows:
            differing: tuple[str, ...] = ()
            if row["kind"] == "changed":
                before, after = row["lake_image"].asDict(), row["history_image"].asDict()
                differing = tuple(c for c in columns if before[c] != after[c])
            result.differences.append(CurrentDifference(row["key"], row["kind"], differing))
    spark.catalog.dropTempView("sluice_history_check")
    result.seconds = time.monotonic() - started
    return result
