"""Tapped tables through the whole pipeline: a dbt project per test, the scaffold, pipeline
runs, and the comparison of a lake table with the MariaDB table.

The comparison is type-aware: DECIMAL compares as numbers, DATETIME/TIMESTAMP as UTC text with
microseconds (Spark hands out naive local datetimes), DATE as dates, JSON as parsed JSON,
text as text (non-ASCII included), BLOB as bytes, NULL as None.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from tests.sources.binlog.support import REPO, Steps, TapEnv

TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f"

# A third table with the types the orders workload does not have: DATE, JSON, BLOB,
# DATETIME(3), a wide DECIMAL, non-ASCII text, NULLs.
DOCS = """CREATE TABLE docs (
  doc_id INT NOT NULL PRIMARY KEY, title VARCHAR(60) NULL, body TEXT NULL, due DATE NULL,
  attrs JSON NULL, payload BLOB NULL, seen_at DATETIME(3) NULL, score DECIMAL(20,6) NULL)"""
TITLES = ("naïve café", "Ærøskøbing", "日本語のタイトル", "emoji 🚀", "", None, "plain")


class DocsWorkload(Steps):
    """Random transactions on ``docs``: inserts, updates of some columns, deletes."""

    def _value(self, column: str) -> Any:
        rng = self.rng
        return self.maybe({
            "title": lambda: rng.choice(TITLES),
            "body": lambda: rng.choice(("ça va ✓", "x" * rng.randint(0, 300), "línea\nnueva")),
            "due": lambda: date(rng.randint(1990, 2030), rng.randint(1, 12), rng.randint(1, 28)),
            "attrs": lambda: json.dumps({"k": rng.randint(0, 9), "tags": ["é", "ß"],
                                         "n": None}, ensure_ascii=False),
            "payload": lambda: bytes(rng.randrange(256) for _ in range(rng.randint(0, 40))),
            "seen_at": lambda: datetime(2024, rng.randint(1, 12), rng.randint(1, 28),
                                        rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59),
                                        rng.randint(0, 999) * 1000),
            "score": lambda: Decimal(rng.randint(-10**12, 10**12)) / 10**6,
        }[column])

    def _change(self, cur: Any, ids: list[int]) -> None:
        columns = ("title", "body", "due", "attrs", "payload", "seen_at", "score")
        roll = self.rng.random()
        if not ids or roll < 0.4:
            cur.execute(f"INSERT INTO docs (doc_id, {', '.join(columns)}) VALUES "
                        f"(%s{', %s' * len(columns)})",
                        (self.next_id, *(self._value(c) for c in columns)))
            ids.append(self.next_id)
            self.next_id += 1
        elif roll < 0.85:
            chosen = self.rng.sample(columns, self.rng.randint(1, 3))
            cur.execute(f"UPDATE docs SET {', '.join(f'{c} = %s' for c in chosen)} "
                        "WHERE doc_id = %s",
                        (*(self._value(c) for c in chosen),
                         ids[0] if self.rng.random() < 0.2 else self.rng.choice(ids)))
        else:
            victim = self.rng.choice(ids)
            cur.execute("DELETE FROM docs WHERE doc_id = %s", (victim,))
            ids.remove(victim)

    def step(self) -> None:
        """One transaction of one to four changes (a fifth of updates hit one hot row)."""
        with self.conn.cursor() as cur:
            cur.execute("SELECT doc_id FROM docs ORDER BY doc_id")
            ids = [r[0] for r in cur.fetchall()]
            for _ in range(self.rng.choice((1, 1, 2, 4))):
                self._change(cur, ids)
        self.conn.commit()



def make_project(root: Path) -> Path:
    """A dbt project in ``root`` (beside the test's sluice.yml): the repo's project settings,
    profile and macros, no models yet (the scaffold writes them)."""
    for name in ("dbt_project.yml", "profiles.yml"):
        shutil.copy(REPO / name, root / name)
    if not (root / "macros").exists():
        (root / "macros").symlink_to(REPO / "macros")
    return root


def scaffold(env: TapEnv) -> Any:
    """`sluice tap --scaffold` in this process; the jobs go into the test's config."""
    from python_ingest.scaffold.dbt import scaffold as write

    settings = env.settings()
    result = write(settings, settings.source(env.source), env.tmp, None)
    env.jobs.update(result.jobs)
    env.write_config()
    return result


def job_of(env: TapEnv, table: str) -> str:
    return next(n for n, j in env.jobs.items() if j["topic"] == env.topic(table))


def run_pipeline(spark: Any, env: TapEnv) -> list[Any]:
    """One `sluice run --all` in this process (python_ingest.steps.pipeline.run_all)."""
    from python_ingest.steps.pipeline import run_all

    settings = env.settings()
    return run_all(spark, settings, sorted(settings.jobs))


def _normal(value: Any, is_json: bool = False) -> Any:
    if isinstance(value, float) and value != value:
        return "NaN"  # equal to itself (PostgreSQL's NaN)
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value.strftime(TIME_FORMAT)
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, Decimal):
        return value.normalize() if value else Decimal(0)
    if is_json and isinstance(value, str):
        return json.loads(value)
    return value


def lake_rows(spark: Any, env: TapEnv, table: str) -> dict[str, dict[str, Any]]:
    """The lake table of ``table``'s job as {row key: source-named, normalised values}."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType

    lake = spark.table(f"lake.{job_of(env, table)}")
    assert lake.where("_is_deleted").count() == 0
    columns = [F.date_format(f.name, "yyyy-MM-dd HH:mm:ss.SSSSSS").alias(f.name)
               if isinstance(f.dataType, TimestampType) else F.col(f.name)
               for f in lake.schema.fields]
    return {r["_row_key"]: r.asDict() for r in lake.select(*columns).collect()}


def assert_lake_equals_source(spark: Any, env: TapEnv, table: str,
                              json_columns: tuple[str, ...] = ()) -> int:
    """The lake table equals the source's table, row for row and value for value."""
    expected = env.source_rows(table)
    actual = lake_rows(spark, env, table)
    missing = sorted(set(expected) - set(actual))[:5]
    extra = sorted(set(actual) - set(expected))[:5]
    assert not missing and not extra, (
        f"{table}: {len(expected)} rows in {env.server_name}, {len(actual)} in the lake; "
        f"missing keys {missing}, extra keys {extra}")
    mismatches = []
    for key, row in expected.items():
        want = {c: _normal(v, c in json_columns) for c, v in row.items()}
        got = {c: _normal(actual[key].get(c, "<no column>"), c in json_columns) for c in row}
        if got != want:
            mismatches.append((key, {c: (got[c], want[c]) for c in row if got[c] != want[c]}))
    assert not mismatches, f"{table}: {len(mismatches)} rows differ (lake, " \
                           f"{env.server_name}): {mismatches[:3]}"
    return len(expected)
