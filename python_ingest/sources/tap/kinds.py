"""The registry of source kinds: what differs between a MariaDB/MySQL binlog and a PostgreSQL
slot, in one place for the CLI, the jobs, verify, status and the scaffold. A source's
``kind:`` in sluice.yml (mariadb, mysql, postgres; its settings: config/source_kinds.py) is
looked up here; nothing else branches on it.

``KINDS`` maps each kind to its ``Parts``, each a ``module:attribute`` name imported when first
used: the tap core depends on no kind package (they depend on it), verify/ and scaffold/ sit
above sources/ (named, never imported here), and a source that is never started never imports
its kind's modules. Each part implements a hook of this module (``TapCore``, ``Bootstrap``,
``Catalog``, ``SourceStatus``, ``Scaffold``) or verify/kinds.py (``SourceVerify``). A new kind
is one package and one line here (docs/write-a-source.md)."""

from __future__ import annotations

import importlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from python_ingest.config import Settings, SourceConfig
from python_ingest.exceptions import SluiceError

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


class Bootstrap(Protocol):
    """``sluice bootstrap``: a consistent snapshot of ``table`` (the kind says what it may
    name: PostgreSQL takes several, or ``all``) into its topic, handed over to the tap."""

    def __call__(self, settings: Settings, source: SourceConfig, table: str, *,
                 workers: int | None = ..., chunk_rows: int | None = ...,
                 progress: Callable[[str], None] = ...) -> Any: ...


class Scaffold(Protocol):
    """``sluice tap --scaffold``: every tapped table's models, suite and job."""

    def __call__(self, settings: Settings, source: SourceConfig, project: Path,
                 config: Path | None, say: Callable[[str], None] | None = ...,
                 history: bool = ...) -> Any: ...


class SourceStatus(ABC):
    """What ``sluice status`` says about a kind's sources, beside the jobs' backlogs."""

    @abstractmethod
    def status(self, settings: Settings, sources: Sequence[SourceConfig]
               ) -> dict[str, dict[str, Any]]:
        """An entry per source with something to say (for ``--json`` and ``lines``)."""

    @abstractmethod
    def lines(self, name: str, entry: dict[str, Any]) -> list[str]:
        """The printed lines of one source's entry."""


class NoStatus(SourceStatus):
    """A kind with nothing of its own to say: MariaDB/MySQL (the server keeps its binlog by
    its own retention; how far the tap is behind shows as its jobs' backlog)."""

    def status(self, settings: Settings, sources: Sequence[SourceConfig]
               ) -> dict[str, dict[str, Any]]:
        return {}

    def lines(self, name: str, entry: dict[str, Any]) -> list[str]:
        return []


@dataclass(frozen=True)
class Parts:
    """One kind's parts, each ``module:attribute``: ``tap`` a TapCore subclass, built as
    ``(settings, source, stop)``; ``bootstrap`` a Bootstrap; ``catalog`` a function returning
    its Catalog; ``verify`` a verify/kinds.py SourceVerify subclass; ``status`` a SourceStatus
    subclass; ``scaffold`` a Scaffold. Optional: ``direct``, a tap/chunks.py Road: the
    kind's side of ``sluice bootstrap --direct`` (a table read straight into its lake by
    Spark tasks, steps/bootstrap.py; empty: the kind has none)."""

    tap: str
    bootstrap: str
    catalog: str
    verify: str
    status: str
    scaffold: str
    direct: str = ""


PARTS = tuple(f.name for f in fields(Parts) if f.name != "direct")
SCAFFOLD = "python_ingest.scaffold.dbt:scaffold"  # one for every kind: driven by the catalog
BINLOG = Parts(tap="python_ingest.sources.binlog.tap:Tap",  # MariaDB and MySQL
               bootstrap="python_ingest.sources.binlog.bootstrap:bootstrap",
               catalog="python_ingest.sources.binlog.server:catalog",
               verify="python_ingest.verify.binlog:BinlogVerify",
               status="python_ingest.sources.tap.kinds:NoStatus",
               scaffold=SCAFFOLD,
               direct="python_ingest.sources.binlog.bulk_read:ROAD")

KINDS: dict[str, Parts] = {
    "mariadb": BINLOG,
    "mysql": BINLOG,
    "postgres": Parts(tap="python_ingest.sources.postgres.tap:PgTap",
                      bootstrap="python_ingest.sources.postgres.snapshot:bootstrap_tables",
                      catalog="python_ingest.sources.postgres.shapes:catalog",
                      verify="python_ingest.verify.postgres:PgVerify",
                      status="python_ingest.sources.postgres.status:PgStatus",
                      scaffold=SCAFFOLD,
                      direct="python_ingest.sources.postgres.direct:ROAD"),
}


def register(kind: str, parts: Parts) -> None:
    """Add (or replace) a kind's parts (its settings: config/source_kinds.py SECTIONS)."""
    KINDS[kind] = parts


def parts_of(kind: str) -> Parts:
    """The parts of ``kind``; an unknown kind is an error naming the known ones."""
    if kind not in KINDS:
        raise SluiceError(f"no source kind {kind!r} in the registry (sources/tap/kinds.py): "
                          f"the known kinds are {', '.join(sorted(KINDS))}")
    return KINDS[kind]


def load(name: str) -> Any:
    """The object a ``module:attribute`` name names, imported now."""
    module, _, attribute = name.partition(":")
    return getattr(importlib.import_module(module), attribute)


def part(source: SourceConfig | str, name: str) -> Any:
    """The ``name`` part of ``source``'s kind (or of the kind so named), imported now."""
    kind = source if isinstance(source, str) else source.kind
    return load(getattr(parts_of(kind), name))


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
    run: Bootstrap = part(source, "bootstrap")
    run(settings, source, table, **options)


def catalog(source: SourceConfig) -> Catalog:
    """The source's tables and their shapes."""
    found: Catalog = part(source, "catalog")()
    return found


def direct(source: SourceConfig) -> Any:
    """``source``'s kind's side of ``sluice bootstrap --direct`` (a tap/chunks.py Road); an
    error naming the kinds that have one when its kind has none."""
    name = parts_of(source.kind).direct
    if not name:
        having = ", ".join(sorted(k for k, p in KINDS.items() if p.direct)) or "none"
        raise SluiceError(f"source {source.name} ({source.kind}): --direct reads the tables of "
                          f"these kinds only so far: {having}; bootstrap it through Kafka "
                          "(without --direct)")
    return load(name)


def scaffold(source: SourceConfig) -> Scaffold:
    """The scaffold of ``source``'s kind."""
    found: Scaffold = part(source, "scaffold")
    return found


def source_status(settings: Settings) -> dict[str, dict[str, Any]]:
    """What ``sluice status`` says of each source, by its kind's status part (by name)."""
    by_kind: dict[str, list[SourceConfig]] = {}
    for _, source in sorted(settings.sources.items()):
        by_kind.setdefault(source.kind, []).append(source)
    out: dict[str, dict[str, Any]] = {}
    for kind, sources in by_kind.items():
        status: SourceStatus = part(kind, "status")()
        out.update(status.status(settings, sources))
    return dict(sorted(out.items()))


def print_sources(settings: Settings, sources: dict[str, dict[str, Any]]) -> None:
    """Print ``source_status``'s entries, each as its kind words it."""
    for name, entry in sources.items():
        status: SourceStatus = part(settings.source(name), "status")()
        for line in status.lines(name, entry):
            print(line)
