"""What the binlog and PostgreSQL demos (demo/binlog.py, demo/postgres.py) share: a fresh dbt
project of their own, the pipeline's rounds, and the lake table compared with the source's,
each value as the tap publishes it (an Avro round trip; tests/sources use it too)."""

from __future__ import annotations

import io
import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from python_ingest.config import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from python_ingest.sources.tap.registry import TableShape


def normal(value: Any) -> Any:
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


def avro_rows(shape: TableShape, rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row's Avro values (as the tap converts them) after an encode/decode round trip."""
    import fastavro

    schema = fastavro.parse_schema({"type": "record", "name": "r",
                                    "fields": [c.field() for c in shape.columns]})
    out = []
    for values in rows:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, schema, values)
        buffer.seek(0)
        decoded = fastavro.schemaless_reader(buffer, schema, schema)
        assert isinstance(decoded, dict)
        out.append(decoded)
    return out


def workload(conn: Any, rng: Any, transactions: int, insert: Callable[[Any, Any], None],
             stamp: Callable[[], Any] | None = None) -> None:
    """Inserts, updates of some columns (a hot row among them), deletes, multi-row commits on
    the demo's ``orders``: ``insert(cursor, stamp)`` in the source's SQL; ``stamp()``, when
    given, the time an insert or update writes (else the server's now())."""
    with conn.cursor() as cur:
        for _ in range(transactions):
            cur.execute("SELECT order_id FROM orders")
            ids = [r[0] for r in cur.fetchall()]
            for _ in range(rng.choice((1, 1, 3))):
                roll = rng.random()
                at = stamp() if stamp is not None else None
                if not ids or roll < 0.45:
                    insert(cur, at)
                elif roll < 0.9:
                    status = rng.choice(("paid", "shipped", "cancelled"))
                    order = ids[0] if rng.random() < 0.3 else rng.choice(ids)
                    if at is None:
                        cur.execute("UPDATE orders SET status = %s, amount = amount + 1, "
                                    "updated_at = now() WHERE order_id = %s", (status, order))
                    else:
                        cur.execute("UPDATE orders SET status = %s, amount = amount + 1, "
                                    "updated_at = %s WHERE order_id = %s", (status, at, order))
                else:
                    cur.execute("DELETE FROM orders WHERE order_id = %s", (rng.choice(ids),))
            conn.commit()


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
        if {c: normal(lake[key].get(c)) for c in row} != row:
            mismatches += 1
    return len(lake), mismatches


def fresh_project(settings: Settings, name: str) -> tuple[Path, Path]:
    """``<state_dir>/<name>/`` emptied, with a dbt project of its own (the package's
    dbt_project.yml, profiles.yml and macros): (the folder, the project)."""
    from python_ingest.steps.dbt import PACKAGE_ROOT

    folder = settings.path(settings.state_dir) / name
    shutil.rmtree(folder, ignore_errors=True)
    project = folder / "dbt"
    project.mkdir(parents=True)
    for file in ("dbt_project.yml", "profiles.yml"):
        shutil.copy(PACKAGE_ROOT / file, project / file)
    (project / "macros").symlink_to(PACKAGE_ROOT / "macros")
    return folder, project


def drop_tables(spark: SparkSession, job: str, source: str) -> None:
    """The last demo's tables of ``job`` (the demo's tables are replaced), and their folders in
    a local warehouse: a new application's catalog may not know a Hudi table an earlier
    `make run` wrote, and its raw table's checkpoint (an earlier run's topic) would stop the
    job."""
    from python_ingest.runtime.catalog import WAREHOUSE_CONF

    warehouse = (spark.conf.get(WAREHOUSE_CONF, "") or "").removeprefix("file://")
    local = Path(warehouse) if warehouse and "://" not in warehouse else None  # not S3
    for schema in ("raw", "staging", "errors", "meta", "lake"):
        for table in (job, f"{job}__raw", f"{job}__tombstones", f"{job}__index",
                      f"stg_{source}__{job}", f"stg_{source}__{job}__valid"):
            spark.sql(f"drop table if exists {schema}.{table} purge")
            if local is not None:
                shutil.rmtree(local / schema / table, ignore_errors=True)


@contextmanager
def project_dir(path: Path) -> Iterator[None]:
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


def run_rounds(spark: SparkSession, settings: Settings, project: Path, job: str,
              rounds: Iterable[tuple[int, int, Callable[[], Any]]],
              say: Callable[[str], None]) -> None:
    """The pipeline's rounds: each ``(round, transactions, tap)`` runs its workload and tap
    (``tap()`` returns its TapStats), then ``sluice run <job>``."""
    from python_ingest.steps.dbt import Dbt
    from python_ingest.steps.pipeline import run_job

    with project_dir(project):
        dbt = Dbt(settings, project)
        for round_no, transactions, tap in rounds:
            stats = tap()
            counts = run_job(spark, settings, settings.jobs[job], dbt=dbt).counts
            say(f"  round {round_no}: {transactions} transactions, tap published "
                f"{stats.messages} row changes; sluice run {job}: read {counts['read']}, "
                f"inserted {counts['inserted']}, updated {counts['updated']}, deleted "
                f"{counts['deleted']}")


def verdict(say: Callable[[str], None], source_table: str, expected: int, job: str,
            lake_rows: int, mismatches: int, seconds: float, doc: str) -> bool:
    """Say how the lake table compares with the source's; whether nothing differed."""
    word = "equal" if mismatches == 0 and lake_rows == expected else "NOT EQUAL"
    say(f"  {source_table}: {expected} rows; lake.{job}: {lake_rows} rows; "
        f"mismatches {mismatches} -> {word} ({seconds:.0f}s; {doc})")
    return mismatches == 0
