"""What differs between the kinds of tapped source, in one place for the CLI, the jobs and the
scaffold: the tap, the snapshot (``sluice bootstrap``) and the catalog (its tables and their
shapes). A source's ``kind`` is ``postgres`` or a MariaDB/MySQL binlog (any other).

``KINDS`` maps each kind to its parts as ``module:attribute`` names, imported when first used:
the tap core depends on no kind package (they depend on it), and a source that is never
started never imports its kind's modules. A new kind adds its line (or calls ``register``)."""

from __future__ import annotations

import importlib
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


BINLOG = "binlog"  # MariaDB and MySQL

# kind → part → "module:attribute": ``tap`` (settings, source, stop) → TapCore,
# ``bootstrap`` (settings, source, table, **options), ``catalog`` () → Catalog
KINDS: dict[str, dict[str, str]] = {
    "postgres": {"tap": "python_ingest.sources.postgres.tap:PgTap",
                 "bootstrap": "python_ingest.sources.postgres.snapshot:bootstrap_tables",
                 "catalog": "python_ingest.sources.postgres.shapes:catalog"},
    BINLOG: {"tap": "python_ingest.sources.binlog.tap:Tap",
             "bootstrap": "python_ingest.sources.binlog.bootstrap:bootstrap",
             "catalog": "python_ingest.sources.binlog.server:catalog"},
}


def register(kind: str, **parts: str) -> None:
    """Add (or replace) a kind's parts, each a ``module:attribute`` name."""
    KINDS[kind] = {**KINDS.get(kind, {}), **parts}


def is_postgres(source: SourceConfig) -> bool:
    return source.kind == "postgres"  # docs/postgres-source.md


def kind_of(source: SourceConfig) -> str:
    """The registry's kind of ``source``: ``postgres``, or ``binlog`` for MariaDB/MySQL."""
    return source.kind if is_postgres(source) else BINLOG


def part(source: SourceConfig, name: str) -> Any:
    """The ``name`` part of ``source``'s kind, imported now (once; looked up at every call)."""
    module, _, attribute = KINDS[kind_of(source)][name].partition(":")
    return getattr(importlib.import_module(module), attribute)


def on_its_cluster(settings: Settings, source: SourceConfig) -> Settings:
    """``settings`` with the source's own ``broker:`` (cluster or user) as the broker."""
    if source.broker is None:
        return settings
    return replace(settings, broker=replace(settings.broker,
                                            bootstrap_servers=settings.kafka_for(source)))


def tap(settings: Settings, source: SourceConfig, stop: threading.Event | None = None
        ) -> TapCore:
    """The tap of ``source``: its binlog, or its PostgreSQL slot."""
    settings = on_its_cluster(settings, source)
    tap_class = part(source, "tap")
    core: TapCore = tap_class(settings, source, stop)
    return core


def bootstrap(settings: Settings, source: SourceConfig, table: str, **options: Any) -> None:
    """``sluice bootstrap``: a consistent snapshot of ``table`` (PostgreSQL: tables), handed
    over to the tap."""
    settings = on_its_cluster(settings, source)
    part(source, "bootstrap")(settings, source, table, **options)


def catalog(source: SourceConfig) -> Catalog:
    """The source's tables and their shapes."""
    found: Catalog = part(source, "catalog")()
    return found
