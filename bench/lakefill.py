"""Shared by the benchmarks that need a big lake table fast: fill it with Spark's range
(copies of one merged row, new keys), and time the pipeline's merge step."""

from __future__ import annotations

import time
from typing import Any

CHUNK = 2_000_000  # rows per insert: Hudi collects each written row's location for the
# record-level index on the driver (10M rows in one insert exhaust a 3 GiB driver)


def fill_lake(spark: Any, lake: str, first_id: int, count: int) -> float:
    """Append ``count`` rows with trip ids from ``first_id`` to the lake table ``lake`` (bulk
    inserts on Hudi, of CHUNK rows each), each a copy of one of its rows with a new key;
    seconds taken."""
    sample = spark.table(lake).where("_row_key is not null").limit(1).collect()[0]
    columns = [f.name for f in spark.table(lake).schema.fields
               if not f.name.startswith("_hoodie_")]
    values = []
    for name in columns:
        if name == "trip_id":
            values.append("id as trip_id")
        elif name == "_row_key":
            values.append(f"replace('{sample['_row_key']}', '{sample['trip_id']}', "
                          "cast(id as string)) as _row_key")
        else:
            values.append(f"s.`{name}`")
    spark.createDataFrame([sample.asDict()]).select(*columns).createOrReplaceTempView("sample")
    hudi = spark.conf.get("spark.sluice.table_format", "hudi") == "hudi"
    if hudi:
        spark.conf.set("hoodie.spark.sql.insert.into.operation", "bulk_insert")
    start = time.perf_counter()
    for low in range(first_id, first_id + count, CHUNK):
        high = min(low + CHUNK, first_id + count)
        spark.sql(f"insert into {lake} ({', '.join(f'`{c}`' for c in columns)}) "
                  f"select {', '.join(values)} from range({low}, {high}) cross join sample s")
    if hudi:
        spark.conf.unset("hoodie.spark.sql.insert.into.operation")
    return time.perf_counter() - start


def time_merges(pipeline: Any) -> list[float]:
    """Make ``pipeline._merge`` record how long each call takes; the list it appends to."""
    seconds: list[float] = []
    merge = pipeline._merge

    def timed_merge(*args: Any) -> None:
        start = time.perf_counter()
        merge(*args)
        seconds.append(time.perf_counter() - start)

    pipeline._merge = timed_merge
    return seconds


def trips_job(workdir: Any, name: str, bootstrap: str, topic: str, table_format: str = "hudi",
              spark_conf: dict[str, str] | None = None) -> tuple[Any, Any, Any, Any, Any]:
    """A demo trips job in its own warehouse under ``workdir`` (config ``sluice-<name>.yml``)
    on an existing broker: (settings, spark, job, dbt, generator)."""
    import os
    from pathlib import Path

    import yaml

    from python_ingest.config import load_settings
    from python_ingest.demo.trips import TripsGenerator, trips_schema
    from python_ingest.kafka.broker import ensure_topic
    from python_ingest.runtime.session import build_session
    from python_ingest.steps.dbt import Dbt

    repo = Path(__file__).resolve().parent.parent
    config = Path(workdir) / f"sluice-{name}.yml"
    config.write_text(yaml.safe_dump({
        "spark": {"master": "local[2]", "conf": spark_conf or {}}, "table_format": table_format,
        "catalog": {"name": "sluice", "type": "hadoop", "warehouse": str(Path(workdir) / name)},
        "broker": {"bootstrap_servers": bootstrap, "embedded": False},
        "state_dir": str(Path(workdir) / f"state-{name}"),
        "jobs": {"trips": {"topic": topic, "schema": str(repo / "schemas" / "trips.avsc"),
                           "row_key": ["trip_id"], "ref_key": "_ref_key"}}}))
    os.environ["SLUICE_DBT_PROJECT_DIR"] = str(repo)
    settings = load_settings(config, env={})
    spark = build_session(settings)
    ensure_topic(bootstrap, topic, 4)
    generator = TripsGenerator(trips_schema(repo), malformed_rate=0.0, duplicate_rate=0.0)
    return settings, spark, settings.job("trips"), Dbt(settings), generator
