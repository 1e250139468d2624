"""Helpers of the PostgreSQL source's tests: the config, running the tap, and the PostgreSQL
table as the oracle compares it (binlog/support.py's TapEnv does the rest: topics, oracle)."""

from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from tests.conftest import warehouse_of
from tests.sources.binlog.support import TapEnv


@contextlib.contextmanager
def admin(postgres: Any, database: str = "postgres") -> Iterator[Any]:
    """A superuser connection (autocommit) to ``database`` of the private cluster."""
    import psycopg2

    conn = psycopg2.connect(host="127.0.0.1", port=postgres.port, user="sluice",
                            dbname=database)
    conn.autocommit = True
    try:
        yield conn
    finally:
        conn.close()


@dataclass
class PgEnv(TapEnv):
    """One test's PostgreSQL database and ``kind: postgres`` source (``self.server`` is the
    session's LocalPostgres)."""

    def write_config(self, **source_overrides: Any) -> Any:
        self.source_overrides.update(source_overrides)
        source = {"kind": "postgres", "host": "127.0.0.1", "port": self.server.port,
                  "user": "sluice", "database": self.database, "include": ["public.*"],
                  "schema_registry": str(self.tmp / "registry"), "checkpoint_interval_s": 0.2,
                  "heartbeat_s": 0.5, "bootstrap_chunk_rows": 500, **self.source_overrides}
        config = {
            "spark": {"master": "local[2]"},
            "catalog": {"name": "sluice", "type": "hadoop",
                        "warehouse": str(warehouse_of(self.workdir, self.table_format))},
            "broker": {"bootstrap_servers": self.bootstrap, "embedded": False},
            "state_dir": str(self.state_dir),
            "table_format": self.table_format,
            "sources": {self.source: source},
            "jobs": self.jobs,
        }
        self.config.write_text(yaml.safe_dump(config, sort_keys=False))
        return self.config

    def connect(self) -> Any:
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.server.port, user="sluice",
                                dbname=self.database)
        conn.autocommit = True
        return conn

    def sql(self, *statements: str, params: Any = None) -> list[tuple[Any, ...]]:
        conn = self.connect()
        try:
            rows: list[tuple[Any, ...]] = []
            with conn.cursor() as cur:
                for statement in statements:
                    cur.execute(statement, params)
                    rows = list(cur.fetchall()) if cur.description else []
            return rows
        finally:
            conn.close()

    def add_jobs(self) -> dict[str, Any]:
        from python_ingest.sources.tap.jobs import job_configs

        settings = self.settings()
        self.jobs.update(job_configs(settings, settings.source(self.source)))
        self.write_config()
        return self.jobs

    def tap_until_end(self) -> Any:
        from python_ingest.sources.postgres.tap import PgTap

        settings = self.settings()
        tap = PgTap(settings, settings.source(self.source))
        tap.run(until_end=True)
        return tap

    def bootstrap_all(self, tables: str = "all", workers: int = 2) -> Any:
        from python_ingest.sources.postgres.snapshot import bootstrap_tables

        settings = self.settings()
        return bootstrap_tables(settings, settings.source(self.source), tables,
                                workers=workers, chunk_rows=200)

    def current_lsn(self) -> int:
        from python_ingest.sources.postgres.position import parse_lsn

        return parse_lsn(self.sql("SELECT pg_current_wal_insert_lsn()::text")[0][0])

    def wait_caught_up(self, timeout_s: float = 120) -> None:
        """Wait until the tap's saved checkpoint reaches the server's current WAL end."""
        from python_ingest.sources.postgres.position import parse_lsn

        target = self.current_lsn()
        deadline = time.monotonic() + timeout_s
        while True:
            cp = self.checkpoint()
            if cp and parse_lsn(cp["lsn"]) >= target:
                return
            for process in self.taps:
                if process.poll() is not None and process.returncode not in (0, -9):
                    raise AssertionError(f"tap exited {process.returncode}: "
                                         f"{process.stdout.read() if process.stdout else ''}")
            if time.monotonic() > deadline:
                raise AssertionError(f"tap did not catch up: checkpoint {cp}, WAL at {target}")
            time.sleep(0.2)

    def topic(self, table: str) -> str:
        return f"{self.source}.public.{table}"

    def source_rows(self, table: str) -> dict[str, dict[str, Any]]:
        """The PostgreSQL table, each value as its Avro value after an encode/decode round
        trip, by row key."""
        import fastavro

        from python_ingest.changelog.keys import row_key_text
        from python_ingest.changelog.schema import KEY_SEPARATOR
        from python_ingest.sources.postgres.events import PgTable, convert
        from python_ingest.sources.postgres.server import connect, raw_text
        from python_ingest.sources.postgres.shapes import table_shape

        settings = self.settings()
        conn = connect(settings.source(self.source))
        try:
            found = table_shape(conn, settings.source(self.source), "public", table)
            raw_text(conn)
            with conn.cursor() as cur:
                cur.execute(f'SELECT {found.select_list()} FROM public."{table}"')
                rows = cur.fetchall()
        finally:
            conn.close()
        shape = found.shape
        pg = PgTable(shape, 0, None, "", found.converters, False)  # type: ignore[arg-type]
        schema = fastavro.parse_schema({"type": "record", "name": "r",
                                        "fields": [c.field() for c in shape.columns]})
        out = {}
        for texts in rows:
            values = convert(pg, list(texts), [])
            buffer = io.BytesIO()
            fastavro.schemaless_writer(buffer, schema, values)
            buffer.seek(0)
            decoded = fastavro.schemaless_reader(buffer, schema, schema)
            assert isinstance(decoded, dict)
            key = shape.key_of(decoded) if shape.key.synthetic else \
                KEY_SEPARATOR.join(str(decoded[k]) for k in shape.primary_key)
            out[row_key_text(key)] = decoded  # the Kafka key (changelog/keys.py)
        return out

    def assert_equal(self, table: str) -> int:
        """The oracle of the table's topic equals the PostgreSQL table (NaN equals NaN)."""
        expected = self.source_rows(table)
        actual = self.oracle(table)
        missing = sorted(set(expected) - set(actual))[:5]
        extra = sorted(set(actual) - set(expected))[:5]
        assert not missing and not extra, f"{table}: missing keys {missing}, extra keys {extra}"
        for key, row in expected.items():
            got = {k: _same(actual[key].get(k)) for k in row}
            want = {k: _same(v) for k, v in row.items()}
            assert got == want, f"{table} row {key}: topic says {got}, PostgreSQL says {want}"
        return len(expected)


def _same(value: Any) -> Any:
    """NaN as a value equal to itself (for comparing rows)."""
    return "NaN" if isinstance(value, float) and value != value else value
