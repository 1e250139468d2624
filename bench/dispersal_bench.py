"""Dispersal benchmark: a lake table of N rows copied to a private PostgreSQL, then a batch
changing 10% of them (updates and deletes) dispersed incrementally; then the same table sent
to a Kafka topic of a private broker (keyed Avro; skip with --no-kafka).

The lake table is filled by Spark's range with trips-like columns (strings, decimals,
timestamps, a date, a boolean) and committed with a merge checkpoint, as the lake
materialization commits (no pipeline run: the dispersal is what is measured). Measured:
  full_s   the first dispersal: N rows COPYed and upserted
  incr_s   the second: N/10 changes (9 updates to 1 delete), from the incremental read
  kafka_s  the lake's N+ rows as messages to a topic, every one acknowledged
Prints, last:
  dispersal: rows=<n> postgres=<rows/s of the full copy> incremental=<rows/s> kafka=<rows/s>

    .venv/bin/python bench/dispersal_bench.py [--rows 1000000] [--format hudi|iceberg]
                                              [--no-kafka]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench.common import lake_settings
from python_ingest.config.dispersal import PostgresTarget
from python_ingest.runtime.session import build_session
from python_ingest.sinks.changes import Position, lake_position
from python_ingest.sinks.pgserver import LocalPostgres
from python_ingest.sinks.postgres import disperse_postgres
from python_ingest.tables.checkpoints import step_properties
from python_ingest.tables.formats import append, ensure_table
from python_ingest.tables.names import JobModels, JobTables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LAKE = ("cast(id as string) as _row_key, id as trip_id, cast(id % 5000 as bigint) as rider_id, "
        "concat('City ', id % 97) as city_name, if(id % 4 = 0, 'completed', 'requested') "
        "as trip_status, id % 4 = 0 as is_completed, cast(id % 8000 / 100 as decimal(10,2)) "
        "as fare_amount, cast(id % 40000 / 1000 as decimal(10,3)) as distance_km, "
        "timestamp('2024-01-01') + make_interval(0, 0, 0, 0, 0, 0, id) as requested_at, "
        "date_add(date('2024-01-01'), cast(id % 365 as int)) as requested_on, "
        "cast(id as bigint) as _ref_key, false as _is_deleted, {batch} as _batch_id")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--format", default="hudi", choices=("hudi", "iceberg"))
    parser.add_argument("--no-kafka", action="store_true", help="PostgreSQL only")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("python_ingest.sinks").setLevel(logging.INFO)
    with tempfile.TemporaryDirectory(prefix="sluice-dispersal-bench-") as tmp:
        work = Path(tmp)
        settings = lake_settings(work, table_format=args.format)
        spark = build_session(settings)
        pg = LocalPostgres().start()
        try:
            tables = JobTables("bench", JobModels(staging="stg_bench", lake="bench"))
            assert tables.lake is not None
            first = spark.range(1, args.rows + 1).selectExpr(
                *_split(LAKE.format(batch=1)))
            ensure_table(spark, tables.lake,
                         [(f.name, f.dataType.simpleString()) for f in first.schema.fields])
            ensure_table(spark, tables.tombstones, [("_row_key", "string"),
                                                    ("_ref_key", "bigint"),
                                                    ("_batch_id", "bigint")])
            append(first, tables.lake, step_properties("merge", 1))
            target = PostgresTarget(name="bench", table="public.trips", dsn=pg.dsn)
            started = time.monotonic()
            full = disperse_postgres(spark, tables, target, _merged(spark, tables))
            full_s = time.monotonic() - started
            print(full.summary(), flush=True)

            changed = spark.range(1, args.rows + 1, 10).selectExpr(
                *_split(LAKE.format(batch=2)))
            updates = changed.where("trip_id % 100 != 1").withColumn("city_name",
                                                                    changed.city_name + "!")
            deletes = changed.where("trip_id % 100 = 1").selectExpr(
                "_row_key", "_ref_key", "cast(2 as bigint) as _batch_id")
            append(deletes, tables.tombstones, step_properties("merge", 2))
            append(updates, tables.lake, step_properties("merge", 2))
            started = time.monotonic()
            incr = disperse_postgres(spark, tables, target, _merged(spark, tables))
            incr_s = time.monotonic() - started
            print(incr.summary(), flush=True)
            kafka = "" if args.no_kafka else _kafka(spark, tables, work)
        finally:
            pg.stop()
            spark.stop()
    print(f"full_s={full_s:.1f} incr_s={incr_s:.1f} ({args.format})")
    print(f"dispersal: rows={full.upserted} postgres={full.upserted / full_s:.0f} "
          f"incremental={(incr.upserted + incr.deleted) / incr_s:.0f}{kafka}")
    return 0


def _kafka(spark: SparkSession, tables: JobTables, work: Path) -> str:
    """The lake (a full copy) to a topic of a private broker; returns ' kafka=<rows/s>'."""
    import socket

    from python_ingest.config.dispersal import KafkaTarget
    from python_ingest.kafka.broker import start_embedded
    from python_ingest.sinks.kafka import disperse_kafka

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    broker = start_embedded(work / "broker", "127.0.0.1", port)
    try:
        started = time.monotonic()
        sent = disperse_kafka(spark, tables, KafkaTarget(name="bench", topic="bench.trips"),
                              _merged(spark, tables), work / "state",
                              f"127.0.0.1:{port}")
        seconds = time.monotonic() - started
        print(sent.summary(), flush=True)
        return f" kafka={(sent.upserted + sent.deleted) / seconds:.0f}"
    finally:
        broker.stop()


def _merged(spark: SparkSession, tables: JobTables) -> Position:
    """Where the lake table stands: the bench committed it with a merge checkpoint."""
    position = lake_position(spark, tables)
    assert position is not None, f"{tables.lake} holds no merge commit"
    return position


def _split(select: str) -> list[str]:
    """The select list's expressions (commas inside parentheses kept)."""
    out, depth, current = [], 0, ""
    for char in select:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            out.append(current.strip())
            current = ""
        else:
            current += char
    return [*out, current.strip()]


if __name__ == "__main__":
    raise SystemExit(main())
