"""The PostgreSQL demo of `make run`: a private PostgreSQL cluster with logical replication,
a workload, the snapshot and the tap, the pipeline, and the lake table compared with the
PostgreSQL table.

Everything lives under ``<state_dir>/postgres-demo/`` and is started afresh each time: the
cluster (``LocalPostgres``), the tap's registry and checkpoint, and a dbt project with what the
scaffold writes, so the repository's own models are not touched. Topics get a new prefix per
run; the demo's tables are replaced.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from python_ingest.config import Settings, parse_job, parse_source
from python_ingest.demo import harness

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TABLE = """CREATE TABLE orders (
  order_id serial PRIMARY KEY, customer text NOT NULL, amount numeric(10,2) NOT NULL,
  status text NOT NULL, note text, attrs jsonb, ordered_on date, updated_at timestamptz NOT NULL,
  receipt bytea)"""
NAMES = ("Ana", "Björk", "Chloé", "Dmitri", "Eşref", "Hiroshi 広")


def _workload(conn: Any, rng: random.Random, transactions: int) -> None:
    """Inserts, updates of some columns (a hot row among them), deletes, multi-row commits."""
    conn.autocommit = False

    def insert(cur: Any, _at: None) -> None:
        cur.execute("INSERT INTO orders (customer, amount, status, note, attrs, ordered_on, "
                    "updated_at, receipt) VALUES (%s, %s, 'new', %s, %s, current_date - %s, "
                    "now(), %s)", (rng.choice(NAMES), rng.randint(100, 99999) / 100,
                                   rng.choice((None, "geschenk ✓", "ça va")),
                                   '{"gift": true, "tags": ["é"]}', rng.randint(0, 900),
                                   bytes(rng.randrange(256) for _ in range(8))))

    harness.workload(conn, rng, transactions, insert)
    conn.autocommit = True


def source_rows(conn: Any, source: Any, table: str) -> dict[str, dict[str, Any]]:
    """The PostgreSQL table keyed like the lake, each value as the tap publishes it."""
    from python_ingest.changelog.keys import row_key_text
    from python_ingest.sources.postgres.events import PgTable, convert
    from python_ingest.sources.postgres.server import raw_text
    from python_ingest.sources.postgres.shapes import table_shape

    found = table_shape(conn, source, "public", table)
    raw_text(conn)
    with conn.cursor() as cur:
        cur.execute(f"SELECT {found.select_list()} FROM public.{table}")
        rows = cur.fetchall()
    pg = PgTable(found.shape, 0, None, "", found.converters, False)  # type: ignore[arg-type]
    return {row_key_text(pg.key_of(decoded)): {k: harness.normal(v) for k, v in decoded.items()}
            for decoded in harness.avro_rows(found.shape,
                                             (convert(pg, list(texts), []) for texts in rows))}


def run_postgres_demo(spark: SparkSession, settings: Settings,
                      say: Callable[[str], None] = print, transactions: int = 150) -> bool:
    """Run the demo; whether the lake ended equal to the source. Without PostgreSQL's server
    binaries it says what to install and skips (True: nothing failed)."""
    from python_ingest.sinks.pgserver import LocalPostgres, find_bin

    if find_bin() is None:
        say("\nPostgreSQL demo skipped: no PostgreSQL server binaries found. Install them "
            "with 'apt-get install postgresql' (or 'make system-deps').")
        return True
    from python_ingest.scaffold.dbt import scaffold
    from python_ingest.sources.postgres import server as pg
    from python_ingest.sources.postgres.snapshot import bootstrap_tables
    from python_ingest.sources.postgres.tap import PgTap

    started = time.monotonic()
    folder, project = harness.fresh_project(settings, "postgres-demo")
    say("\nPostgreSQL demo: a private cluster (wal_level=logical), a snapshot, a workload, the "
        "tap, the pipeline")
    cluster = LocalPostgres(settings=pg.LOCAL_SETTINGS).start()
    try:
        source = parse_source("pg_demo", {
            "kind": "postgres", "host": "127.0.0.1", "port": cluster.port, "user": "sluice",
            "database": "postgres", "include": ["public.orders"],
            "topic_prefix": f"pg_demo_{int(time.time())}",
            "schema_registry": str(folder / "registry"), "heartbeat_s": 0.5})
        conn = pg.connect(source)
        with conn.cursor() as cur:
            cur.execute(TABLE)
        rng = random.Random(11)
        _workload(conn, rng, transactions // 3)  # rows before the tap: the snapshot's
        demo = replace(settings, sources={source.name: source},
                       state_dir=str(folder / "state"))
        written = scaffold(demo, source, project, None)
        demo = replace(demo, jobs={n: parse_job(n, j, demo.root) for n, j in written.jobs.items()
                                   if n == "public_orders"})
        name = "public_orders"
        harness.drop_tables(spark, name, "pg_demo")
        snapshot = bootstrap_tables(demo, source, "all")
        say(f"  snapshot: {snapshot.total} rows under the slot's exported snapshot")

        def tap() -> Any:
            _workload(conn, rng, transactions // 3)
            return PgTap(demo, source).run(until_end=True)

        harness.run_rounds(spark, demo, project, name,
                           [(n, transactions // 3, tap) for n in (1, 2)], say)
        expected = source_rows(conn, source, "orders")
        conn.close()
        lake_rows, mismatches = harness.compare(spark, f"lake.{name}", expected)
    finally:
        cluster.stop()
    return harness.verdict(say, "public.orders in PostgreSQL", len(expected), name,
                           lake_rows, mismatches, time.monotonic() - started,
                           "docs/postgres-source.md")
