"""History tables written directly in the history's schema (docs/history.md), for the change
feed's tests: one row per version, keyed (_row_key, _ref_key), on a merge-on-read table whose
closing of versions stays in Hudi log files or Iceberg delete files (nothing compacted)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from python_ingest.runtime.catalog import INSERT_OPERATION, insert_operation_kept

COLUMNS = [("_row_key", "string"), ("trip_id", "bigint"), ("city_name", "string"),
           ("fare_amount", "decimal(10,2)"), ("_ref_key", "bigint"), ("_is_deleted", "boolean"),
           ("_event_ts", "timestamp"), ("_batch_id", "bigint"), ("_valid_from", "timestamp"),
           ("_valid_to", "timestamp"), ("_is_current", "boolean"), ("_closed_ref_key", "bigint"),
           ("_closed_batch_id", "bigint")]
T0 = dt.datetime(2026, 3, 1, 8, 0)


def at(minutes: int) -> dt.datetime:
    """A source commit time: ``minutes`` after 2026-03-01 08:00 UTC."""
    return T0 + dt.timedelta(minutes=minutes)


def create(spark: Any, table: str, table_format: str) -> None:
    """An empty history table, merge-on-read (Hudi: bucket index, so updates go to log files;
    Iceberg: format 2, updates as delete files)."""
    from python_ingest.runtime.catalog import location

    ddl = ", ".join(f"`{n}` {t}" for n, t in COLUMNS)
    if table_format == "hudi":
        spark.sql(f"create table {table} ({ddl}) using hudi location "
                  f"'{location(spark, table)}' tblproperties (type='mor', "
                  "primaryKey='_row_key,_ref_key', preCombineField='_batch_id', "
                  "'hoodie.record.merge.mode'='COMMIT_TIME_ORDERING', "
                  "'hoodie.index.type'='BUCKET', 'hoodie.bucket.index.num.buckets'='1', "
                  "'hoodie.bucket.index.hash.field'='_row_key', 'hoodie.metadata.enable'='false', "
                  "'hoodie.compact.inline'='false')")
    else:
        spark.sql(f"create table {table} ({ddl}) using iceberg tblproperties "
                  "('format-version'='2', 'write.delete.mode'='merge-on-read', "
                  "'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read')")


def version(key: int, ref: int, minute: int, batch: int, fare: float | None,
            deleted: bool = False, until: tuple[int, int, int] | None = None
            ) -> tuple[Any, ...]:
    """One version row: trip ``key`` after change ``ref`` at ``minute``; ``until``: closed at
    (minute, by ref key, in batch)."""
    from decimal import Decimal

    end, ref_closing, batch_closing = until or (None, None, None)
    return (str(key), key, "Zürich", None if fare is None else Decimal(f"{fare:.2f}"), ref,
            deleted, at(minute), batch, at(minute), None if end is None else at(end),
            until is None, ref_closing, batch_closing)


def insert(spark: Any, table: str, rows: list[tuple[Any, ...]]) -> None:
    schema = ", ".join(f"`{n}` {t}" for n, t in COLUMNS)
    spark.createDataFrame(rows, schema).createOrReplaceTempView("history_rows")
    # Hudi: an upsert, into the key's bucket (a plain insert may start a file group of its
    # own in the same bucket, and an update then finds the key twice)
    # (and the session's own setting back after it, bulk_insert: a later test reads it)
    with insert_operation_kept(spark):
        spark.conf.set(INSERT_OPERATION, "upsert")
        spark.sql(f"insert into {table} select * from history_rows")


def close(spark: Any, table: str, ends: dict[tuple[int, int], tuple[int, int, int]]) -> None:
    """Close versions {(key, ref): (minute, closing ref key, closing batch)}: one update in
    place (a log or delete file)."""
    def case(value: Any) -> str:
        return "case " + " ".join(f"when _row_key = '{k}' and _ref_key = {r} then {value(e)}"
                                  for (k, r), e in ends.items()) + " end"

    def moment(end: tuple[int, int, int]) -> str:
        return f"timestamp'{at(end[0])}'"

    which = " or ".join(f"(_row_key = '{k}' and _ref_key = {r})" for k, r in ends)
    spark.sql(f"update {table} set _valid_to = {case(moment)}, "
              f"_closed_ref_key = {case(lambda e: e[1])}, "
              f"_closed_batch_id = {case(lambda e: e[2])}, _is_current = false where {which}")


def build_three_batches(spark: Any, table: str, table_format: str) -> None:
    """Three batches of versions, as the history holds them after the third:

    batch 1: trips 1, 2, 3 inserted (refs 10, 11, 12 at 08:00, 08:01, 08:02)
    batch 2: trip 1 updated (ref 20, 09:00); trip 2 deleted as a new record (ref 21, 09:01);
             trip 3 deleted by invalidation (ref 22: its version closed at 09:02, no new
             version)
    batch 3: trip 1's late change ref 15 (08:30) spliced between 10 and 20; trip 2 inserted
             again (ref 31, 10:01); trip 4 inserted (ref 32, 10:02)
    """
    create(spark, table, table_format)
    insert(spark, table, [version(1, 10, 0, 1, 10), version(2, 11, 1, 1, 11),
                          version(3, 12, 2, 1, 12)])
    # batches 2 and 3 in one write (each row carries its batch), then every closing in one
    # update in place: three commits keep the test short, the closings stay uncompacted
    insert(spark, table, [version(1, 20, 60, 2, 20), version(2, 21, 61, 2, None, deleted=True),
                          version(1, 15, 30, 3, 15, until=(60, 20, 3)),
                          version(2, 31, 121, 3, 31),
                          version(4, 32, 122, 3, 32)])
    close(spark, table, {(1, 10): (30, 15, 3), (2, 11): (61, 21, 2), (3, 12): (62, 22, 2),
                         (2, 21): (121, 31, 3)})


def merge_on_read_files(spark: Any, table: str, table_format: str) -> int:
    """How many files hold changes not yet compacted: Hudi log files, Iceberg delete files."""
    if table_format == "hudi":
        from python_ingest.runtime.catalog import location

        folder = Path(location(spark, table).removeprefix("file:"))
        return len([f for f in folder.rglob("*") if ".log." in f.name])
    return int(spark.sql(f"select count(*) from {table}.delete_files").collect()[0][0])
