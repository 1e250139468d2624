"""Helpers of the PostgreSQL source's tests: the source, its server, and the PostgreSQL table
as the oracle compares it (binlog/support.py's TapEnv does the rest: config, running the tap,
topics, the oracle)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

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


# a TOASTed value: 300 md5s, about 10 kB of text stored out of line
BIG = "(SELECT string_agg(md5(random()::text || g), '') FROM generate_series(1, 300) g)"


def tapped_docs(env: Any, rows: int = 3) -> None:
    """A table ``docs`` (doc_id, title, body) with its job, tapped, then ``rows`` rows whose
    body is TOASTed (BIG), tapped too."""
    env.sql("CREATE TABLE docs (doc_id int PRIMARY KEY, title text, body text)")
    env.add_jobs()
    env.tap_until_end()
    env.sql(f"INSERT INTO docs SELECT g, 't' || g, {BIG} FROM generate_series(1, {rows}) g")
    env.tap_until_end()


def decoded_events(env: Any, table: str) -> list[dict]:
    """The tapped topic of ``table`` decoded, in ref key order."""
    decoder = env.decoder(table)
    return sorted((decoder.decode(value) for _key, value in env.messages(table)),
                  key=lambda r: r["_ref_key"])


def recreate_database(env: Any, encoding: str) -> None:
    """Drop the test's database and create it again in ``encoding`` (C collation)."""
    with admin(env.server) as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE {env.database}")
        cur.execute(f"CREATE DATABASE {env.database} ENCODING '{encoding}' LC_COLLATE 'C' "
                    "LC_CTYPE 'C' TEMPLATE template0")


def partitioned_events(below_2024: str = "") -> tuple[str, ...]:
    """A table ``events`` partitioned by year (2023, 2024); ``below_2024``: how 2024 is
    partitioned further."""
    return ("CREATE TABLE events (id int, at date, what text, PRIMARY KEY (id, at)) "
            "PARTITION BY RANGE (at)",
            "CREATE TABLE events_2023 PARTITION OF events FOR VALUES FROM ('2023-01-01') "
            "TO ('2024-01-01')",
            "CREATE TABLE events_2024 PARTITION OF events FOR VALUES FROM ('2024-01-01') "
            "TO ('2025-01-01')" + below_2024)


@dataclass
class PgEnv(TapEnv):
    """One test's PostgreSQL database and ``kind: postgres`` source (``self.server`` is the
    session's LocalPostgres)."""

    server_name = "PostgreSQL"

    def source_config(self) -> dict[str, Any]:
        return {"kind": "postgres", "host": "127.0.0.1", "port": self.server.port,
                "user": "sluice", "database": self.database, "include": ["public.*"],
                "schema_registry": str(self.tmp / "registry"), "checkpoint_interval_s": 0.2,
                "heartbeat_s": 0.5, "bootstrap_chunk_rows": 500, **self.source_overrides}

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

    def bootstrap_all(self, tables: str = "all", workers: int = 2) -> Any:
        from python_ingest.sources.postgres.snapshot import bootstrap_tables

        settings = self.settings()
        return bootstrap_tables(settings, settings.source(self.source), tables,
                                workers=workers, chunk_rows=200)

    def current_lsn(self) -> int:
        from python_ingest.sources.postgres.position import parse_lsn

        return parse_lsn(self.sql("SELECT pg_current_wal_insert_lsn()::text")[0][0])

    def end(self) -> int:
        return self.current_lsn()

    def caught_up(self, checkpoint: dict[str, Any], end: Any) -> bool:
        from python_ingest.sources.postgres.position import parse_lsn

        return bool(parse_lsn(checkpoint["lsn"]) >= end)

    def topic(self, table: str) -> str:
        return f"{self.source}.public.{table}"

    def table_values(self, table: str) -> tuple[Any, list[dict[str, Any]]]:
        """The table's shape and its rows' Avro values, as the tap converts them."""
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
        pg = PgTable(found.shape, 0, None, "", found.converters, False)  # type: ignore[arg-type]
        return found.shape, [convert(pg, list(texts), []) for texts in rows]
