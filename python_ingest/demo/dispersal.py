"""The demo's dispersal: ``lake.trips`` copied to a private PostgreSQL server and to a Kafka
topic, as a job's ``dispersal:`` section would have the runner do after each merge
(docs/dispersal.md). Skipped, saying why, where no PostgreSQL server is installed."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from python_ingest.config import Settings
from python_ingest.config.dispersal import DispersalTarget, KafkaTarget, PostgresTarget
from python_ingest.sinks import disperse
from python_ingest.sinks.pgserver import LocalPostgres, find_bin
from python_ingest.tables.lease import job_lease
from python_ingest.tables.names import JobTables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JOB = "trips"
TOPIC = "lake.trips"


def run_dispersal_demo(spark: SparkSession, settings: Settings, tables: JobTables) -> bool:
    """Disperse the demo's lake table; whether PostgreSQL ended equal to it (in row count and
    keys)."""
    if JOB not in settings.jobs or tables.lake is None:
        return True
    print(f"\ndispersal: {tables.lake} -> a private PostgreSQL (public.trips) and the Kafka "
          f"topic {TOPIC} (sluice disperse; docs/dispersal.md)")
    if find_bin() is None:
        print("  skipped: no PostgreSQL server binaries (`make system-deps` installs them)")
        return True
    server = LocalPostgres().start()
    try:
        targets: dict[str, DispersalTarget] = {
            "trips_pg": PostgresTarget("trips_pg", "public.trips", dsn=server.dsn),
            "trips_topic": KafkaTarget("trips_topic", TOPIC)}
        job = replace(settings.job(JOB), dispersal=targets)
        with job_lease(spark, JOB):
            for name in sorted(targets):
                result = disperse(spark, settings, job, tables, name)
                if result is not None:
                    print(f"  {result.summary()}")
        import psycopg

        with psycopg.connect(server.dsn) as conn:
            keys = {row[0] for row in conn.execute("select _row_key from public.trips")}
        lake = {row[0] for row in spark.table(tables.lake).select("_row_key").collect()}
        equal = keys == lake
        print(f"  public.trips in PostgreSQL: {len(keys)} rows; {tables.lake}: {len(lake)} rows"
              f" -> {'equal' if equal else 'DIFFERENT'}")
        return equal
    finally:
        server.stop()
