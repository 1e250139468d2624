"""What differs between the kinds of tapped source, in one place for the CLI, the jobs and the
scaffold: the tap, the snapshot (``sluice bootstrap``) and the catalog (its tables and their
shapes). A source's ``kind`` is ``postgres`` or a MariaDB/MySQL binlog (any other)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from python_ingest.config import Settings, SourceConfig

if TYPE_CHECKING:
    from python_ingest.sources.tap.core import TapCore
    from python_ingest.sources.tap.registry import TableShape


@dataclass(frozen=True)
class Catalog:
    """A source's tables and their current shapes (``registered``: the latest registered
    schema, which keeps a key the tap chose before)."""

    connect: Callable[[SourceConfig], Any]
    tables: Callable[[Any, SourceConfig], list[tuple[str, str]]]
    table_shape: Callable[[Any, SourceConfig, str, str, dict[str, Any] | None], TableShape]


def is_postgres(source: SourceConfig) -> bool:
    return source.kind == "postgres"  # docs/postgres-source.md


def on_its_cluster(settings: Settings, source: SourceConfig) -> Settings:
    """``settings`` with the source's own ``broker:`` (cluster or user) as the broker."""
    if source.broker is None:
        return settings
    servers = source.broker.on(settings.broker.bootstrap_servers)
    return replace(settings, broker=replace(settings.broker, bootstrap_servers=servers))


def tap(settings: Settings, source: SourceConfig, stop: threading.Event | None = None
        ) -> TapCore:
    """The tap of ``source``: its binlog, or its PostgreSQL slot."""
    settings = on_its_cluster(settings, source)
    if is_postgres(source):
        from python_ingest.sources.postgres.tap import PgTap

        return PgTap(settings, source, stop)
    from python_ingest.sources.binlog.tap import Tap

    return Tap(settings, source, stop)


def bootstrap(settings: Settings, source: SourceConfig, table: str, **options: Any) -> None:
    """``sluice bootstrap``: a consistent snapshot of ``table`` (PostgreSQL: tables), handed
    over to the tap."""
    settings = on_its_cluster(settings, source)
    if is_postgres(source):
        from python_ingest.sources.postgres.snapshot import bootstrap_tables

        bootstrap_tables(settings, source, table, **options)
        return
    from python_ingest.sources.binlog.bootstrap import bootstrap as binlog_bootstrap

    binlog_bootstrap(settings, source, table, **options)


def catalog(source: SourceConfig) -> Catalog:
    """The source's tables and their shapes."""
    if is_postgres(source):
        from python_ingest.sources.postgres import server as pg_server
        from python_ingest.sources.postgres.shapes import table_shape

        return Catalog(pg_server.connect, pg_server.tables,
                       lambda conn, src, db, t, reg: table_shape(conn, src, db, t, reg).shape)
    from python_ingest.sources.binlog import server

    return Catalog(server.connect, server.tables,
                   lambda conn, src, db, t, reg: server.table_shape(conn, db, t, src, reg))
