"""The binlog demo of `make run`: a private MariaDB, a workload, the tap, the pipeline, and the
lake table compared with the MariaDB table.

Everything lives under ``<state_dir>/binlog-demo/`` and is started afresh each time: the
server (``LocalServer``), the tap's registry and checkpoint, and a dbt project with the models
and suite the scaffold writes (``sluice tap --scaffold``), so the repository's own models are
not touched. Topics get a new prefix per run; the demo's tables are replaced.
"""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from python_ingest.config import Settings, parse_job, parse_source

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
    with conn.cursor() as cur:
        for _ in range(transactions):
            cur.execute("SELECT order_id FROM orders")
            ids = [r[0] for r in cur.fetchall()]
            for _ in range(rng.choice((1, 1, 3))):
                roll = rng.random()
                stamp = datetime(2024, rng.randint(1, 12), rng.randint(1, 28), rng.randint(0, 23),
                                 rng.randint(0, 59), rng.randint(0, 59), rng.randint(0, 999999))
                if not ids or roll < 0.45:
                    cur.execute(
                        "INSERT INTO orders (customer, amount, status, note, attrs, ordered_on, "
                        "updated_at, receipt) VALUES (%s, %s, 'new', %s, %s, %s, %s, %s)",
                        (rng.choice(NAMES), Decimal(rng.randint(100, 99999)) / 100,
                         rng.choice((None, "geschenk ✓", "ça va")),
                         json.dumps({"gift": rng.random() < 0.5, "tags": ["é"]}),
                         stamp.date(), stamp, bytes(rng.randrange(256) for _ in range(8))))
                elif roll < 0.9:
                    cur.execute("UPDATE orders SET status = %s, amount = amount + 1, "
                                "updated_at = %s WHERE order_id = %s",
                                (rng.choice(("paid", "shipped", "cancelled")), stamp,
                                 ids[0] if rng.random() < 0.3 else rng.choice(ids)))
                else:
                    cur.execute("DELETE FROM orders WHERE order_id = %s", (rng.choice(ids),))
            conn.commit()


def _normal(value: Any) -> Any:
    """One value, comparable across both sides: UTC naive datetimes, bytes, parsed JSON."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def source_rows(conn: Any, db: str, table: str) -> dict[str, dict[str, Any]]:
    """The MariaDB table keyed like the lake (row key), each value as the tap publishes it."""
    import fastavro

    from python_ingest.changelog.keys import row_key_text
    from python_ingest.changelog.schema import KEY_SEPARATOR
    from python_ingest.sources.binlog.columns import to_avro
    from python_ingest.sources.binlog.server import table_shape

    shape = table_shape(conn, db, table)
    schema = fastavro.parse_schema({"type": "record", "name": "r",
                                    "fields": [c.field() for c in shape.columns]})
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{db}`.`{table}`")
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    out = {}
    for row in rows:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, schema, {c.name: to_avro(c, row[c.name])
                                                    for c in shape.columns})
        buffer.seek(0)
        decoded: dict[str, Any] = fastavro.schemaless_reader(  # type: ignore[assignment]
            buffer, schema, schema)
        key = KEY_SEPARATOR.join(str(decoded[k]) for k in shape.primary_key)
        out[row_key_text(key)] = {k: _normal(v) for k, v in decoded.items()}
    return out


def compare(spark: SparkSession, lake_table: str, expected: dict[str, dict[str, Any]]
            ) -> tuple[int, int]:
    """(lake rows, mismatches): rows missing, extra or with any value that differs."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType

    frame = spark.table(lake_table)  # timestamps as UTC wall time (collect would use local)
    frame = frame.select(*[F.col(f.name).cast("timestamp_ntz").alias(f.name)
                           if isinstance(f.dataType, TimestampType) else F.col(f.name)
                           for f in frame.schema.fields])
    lake = {r["_row_key"]: r.asDict() for r in frame.collect()}
    mismatches = len(set(lake) ^ set(expected))
    for key in set(lake) & set(expected):
        row = expected[key]
        if {c: _normal(lake[key].get(c)) for c in row} != row:
            mismatches += 1
    return len(lake), mismatches


@contextmanager
def _project_dir(path: Path) -> Iterator[None]:
    """The demo's own dbt project for the pipeline's dbt and suite look-ups."""
    from python_ingest.steps.dbt import PROJECT_DIR_ENV

    saved = os.environ.get(PROJECT_DIR_ENV)
    os.environ[PROJECT_DIR_ENV] = str(path)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(PROJECT_DIR_ENV, None)
        else:
            os.environ[PROJECT_DIR_ENV] = saved


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
    from python_ingest.steps.dbt import PACKAGE_ROOT, Dbt
    from python_ingest.steps.pipeline import run_job

    started = time.monotonic()
    folder = settings.path(settings.state_dir) / "binlog-demo"
    shutil.rmtree(folder, ignore_errors=True)
    project = folder / "dbt"
    project.mkdir(parents=True)
    for name in ("dbt_project.yml", "profiles.yml"):
        shutil.copy(PACKAGE_ROOT / name, project / name)
    (project / "macros").symlink_to(PACKAGE_ROOT / "macros")
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
        (name, job), = demo.jobs.items()
        for schema in ("raw", "staging", "errors", "meta", "lake"):  # the last demo's tables
            for table in (name, f"{name}__raw", f"{name}__tombstones", f"{name}__index",
                          f"stg_binlog_demo__{name}", f"stg_binlog_demo__{name}__valid"):
                spark.sql(f"drop table if exists {schema}.{table} purge")
        Tap(demo, source).run(until_end=True)  # the tap's checkpoint: the binlog's end now
        rng = random.Random(7)
        with _project_dir(project):
            dbt = Dbt(demo, project)
            for round_no in (1, 2):
                with server.root(DATABASE) as conn:
                    _workload(conn, rng, transactions // 2)
                stats = Tap(demo, source).run(until_end=True)
                result = run_job(spark, demo, job, dbt=dbt)
                counts = result.counts
                say(f"  round {round_no}: {transactions // 2} transactions, tap published "
                    f"{stats.messages} row changes; sluice run {name}: read {counts['read']}, "
                    f"inserted {counts['inserted']}, updated {counts['updated']}, deleted "
                    f"{counts['deleted']}")
        with server.root(DATABASE) as conn:
            expected = source_rows(conn, DATABASE, "orders")
        lake_rows, mismatches = compare(spark, f"lake.{name}", expected)
    finally:
        server.stop()
    verdict = "equal" if mismatches == 0 and lake_rows == len(expected) else "NOT EQUAL"
    say(f"  {DATABASE}.orders in MariaDB: {len(expected)} rows; lake.{name}: {lake_rows} rows; "
        f"mismatches {mismatches} -> {verdict} ({time.monotonic() - started:.0f}s; "
        "docs/binlog-tap.md)")
    return mismatches == 0
