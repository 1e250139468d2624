"""What the binlog tap's collaborators (tap_ddl.py, tap_tables.py, tap_resume.py,
tap_failover.py) may read and change of the tap: its state, typed. ``Tap`` (tap.py) has all of
it; the collaborators take a ``TapState`` instead of the tap itself, so they import nothing of
tap.py (which imports them) and every attribute they touch is declared here, once."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from python_ingest.config import Settings, SourceConfig
    from python_ingest.sources.binlog.charsets import Charsets
    from python_ingest.sources.binlog.events import TappedTable
    from python_ingest.sources.binlog.existence import Existence
    from python_ingest.sources.binlog.position import BinlogCheckpointStore, BinlogPosition
    from python_ingest.sources.tap.core import TapStats
    from python_ingest.sources.tap.keys import RowCounts
    from python_ingest.sources.tap.producer import ChangelogProducer
    from python_ingest.sources.tap.registry import Registry, TableShape


class TapState(Protocol):
    """The binlog tap as its collaborators see it."""

    # the shared core's (sources/tap/core.py)
    settings: Settings
    source: SourceConfig
    store: BinlogCheckpointStore
    registry_root: Path
    stats: TapStats
    stopped: dict[str, dict[str, Any]]
    rows: RowCounts
    producer: ChangelogProducer | None
    _conn: Any

    # the binlog tap's own (tap.py)
    tables: dict[tuple[str, str], TappedTable]
    existence: Existence
    _signatures: dict[tuple[str, str], tuple[Any, ...]]
    _table_objs: dict[tuple[str, str], Any]
    _charsets: Charsets | None
    _last_end: BinlogPosition | None
    _saved: BinlogPosition | None
    _gtid: str | None
    _server: dict[str, Any] | None
    _resume_gtid: str | None
    _failing_over: bool
    _generation: int
    _boundary: BinlogPosition | None
    _in_transaction: bool

    def _where(self) -> str: ...

    def _stop_table(self, db: str, name: str, reason: str) -> None: ...

    def _register_shape(self, registry: Registry, previous: int | None,
                        shape: TableShape) -> int: ...
