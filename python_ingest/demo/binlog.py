"""The binlog demo of `make run`: a private MariaDB, a workload, the tap, the pipeline, and the
lake table compared with the MariaDB table.

Everything lives under ``<state_dir>/binlog-demo/`` and is started afresh each time: the
server (``LocalServer``), the tap's registry and checkpoint, and a dbt project with the models
and suite the scaffold writes (``sluice tap --scaffold``), so the repository's own models are
not touched. Topics get a new prefix per run; the demo's tables are replaced.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from python_ingest.config import Settings, parse_job, parse_source
from python_ingest.demo import harness

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DATABASE = "binlog_demo"  # jobs binlog_demo_<table>: never a user's job
TABLE = """CREATE TABLE orders (
  order_id INT AUTO_INCREMENT PRIMARY KEY, customer VARCHAR(40) NOT NULL,
  amount DECIMAL(10,2) NOT NULL, status ENUM('new','paid','shipped','cancelled') NOT NULL,
  note TEXT NULL, attrs JSON NULL, ordered_on DATE NULL, updated_at DATETIME(6) NOT NULL,
  receipt BLOB NULL)"""
NAMES = ("Ana", "Björk", "Chloé", "Dmitri", "Eşref", "Hiroshi 広")


def server_available() -> bool:
    from python_ingest.sources.binlog.server import find_mariadbd

    return find_mariadbd() is not None and bool(
        shutil.which("mariadb-install-db") or shutil.which("mysql_install_db"))


def _workload(conn: Any, rng: random.Random, transactions: int) -> None:
    """Inserts, updates of some columns (a hot row among them), deletes, multi-row commits."""
    conn.autocommit(False)

    def stamp() -> datetime:
        return datetime(2024, rng.randint(1, 12), rng.randint(1, 28), rng.randint(0, 23),
                        rng.randint(0, 59), rng.randint(0, 59), rng.randint(0, 999999))

    def insert(cur: Any, at: datetime) -> None:
        cur.execute("INSERT INTO orders (customer, amount, status, note, attrs, ordered_on, "
                    "updated_at, receipt) VALUES (%s, %s, 'new', %s, %s, %s, %s, %s)",
                    (rng.choice(NAMES), Decimal(rng.randint(100, 99999)) / 100,
                     rng.choice((None, "geschenk ✓", "ça va")),
                     json.dumps({"gift": rng.random() < 0.5, "tags": ["é"]}),
                     at.date(), at, bytes(rng.randrange(256) for _ in range(8))))

    harness.workload(conn, rng, transactions, insert, stamp)


def source_rows(conn: Any, db: str, table: str) -> dict[str, dict[str, Any]]:
    """The MariaDB table keyed like the lake (row key), each value as the tap publishes it."""
    from python_ingest.changelog.keys import row_key_text
    from python_ingest.changelog.schema import KEY_SEPARATOR
    from python_ingest.sources.binlog.columns import to_avro
    from python_ingest.sources.binlog.server import table_shape

    shape = table_shape(conn, db, table)
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{db}`.`{table}`")
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    out = {}
    values = ({c.name: to_avro(c, row[c.name]) for c in shape.columns} for row in rows)
    for decoded in harness.avro_rows(shape, values):
        key = KEY_SEPARATOR.join(str(decoded[k]) for k in shape.primary_key)
        out[row_key_text(key)] = {k: harness.normal(v) for k, v in decoded.items()}
    return out


def run_binlog_demo(spark: SparkSession, settings: Settings,
                    say: Callable[[str], None] = print, transactions: int = 150) -> bool:
    """Run the demo; whether the lake ended equal to the source. Without a MariaDB server it
    says what to install and skips (True: nothing failed)."""
    if not server_available():
        say("\nbinlog demo skipped: no MariaDB server binary found. Install it with "
            "'apt-get install mariadb-server' (or 'make system-deps') to see the binlog tap.")
        return True
    from python_ingest.scaffold.dbt import scaffold
    from python_ingest.sources.binlog.server import LocalServer
    from python_ingest.sources.binlog.tap import Tap

    started = time.monotonic()
    folder, project = harness.fresh_project(settings, "binlog-demo")
    say("\nbinlog demo: a private MariaDB server, a workload, the tap, the pipeline")
    server = LocalServer(folder / "mariadb").start()
    try:
        with server.root() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {DATABASE}")
            cur.execute(f"USE {DATABASE}")
            cur.execute(TABLE)
        source = parse_source("binlog_demo", server.source_config(
            include=[f"{DATABASE}.*"], topic_prefix=f"binlog_demo_{int(time.time())}",
            schema_registry=str(folder / "registry"), heartbeat_s=0.5))
        demo = replace(settings, sources={source.name: source},
                       state_dir=str(folder / "state"))
        written = scaffold(demo, source, project, None)
        demo = replace(demo, jobs={n: parse_job(n, j, demo.root) for n, j in written.jobs.items()})
        (name, _), = demo.jobs.items()
        harness.drop_tables(spark, name, "binlog_demo")
        Tap(demo, source).run(until_end=True)  # the tap's checkpoint: the binlog's end now
        rng = random.Random(7)

        def tap() -> Any:
            with server.root(DATABASE) as conn:
                _workload(conn, rng, transactions // 2)
            return Tap(demo, source).run(until_end=True)

        harness.run_rounds(spark, demo, project, name,
                           [(n, transactions // 2, tap) for n in (1, 2)], say)
        with server.root(DATABASE) as conn:
            expected = source_rows(conn, DATABASE, "orders")
        lake_rows, mismatches = harness.compare(spark, f"lake.{name}", expected)
    finally:
        server.stop()
    return harness.verdict(say, f"{DATABASE}.orders in MariaDB", len(expected), name,
                           lake_rows, mismatches, time.monotonic() - started, "docs/binlog-tap.md")
