"""What every tap does around its stream (binlog/tap.py ``Tap``, postgres/tap.py ``PgTap``):
one tap per source (the checkpoint store's lock), the producer and the error topic, a table's
schema version registered and its topic made, changes published and counted, and the clean
stop: every event produced acknowledged, then the checkpoint saved. Each tap reads its own
stream and says what a checkpoint holds (``_maybe_save``) and where it stands (``_where``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from python_ingest.config import Settings, SourceConfig
from python_ingest.exceptions import TapError
from python_ingest.kafka import broker as broker_mod
from python_ingest.sources.tap import keys
from python_ingest.sources.tap.changes import Change, Envelope
from python_ingest.sources.tap.checkpoints import CheckpointStore
from python_ingest.sources.tap.errors import ErrorSink, check_topic_limit, error_topic, publish
from python_ingest.sources.tap.producer import ChangelogProducer
from python_ingest.sources.tap.registry import Registry, TableShape

log = logging.getLogger(__name__)


def registry_root(settings: Settings, source: SourceConfig) -> Path:
    """The folder of the source's schema registry (one sub-folder per table)."""
    return settings.path(source.schema_registry or f"{settings.state_dir}/schemas/{source.name}")


def topic_for(source: SourceConfig, db: str, table: str) -> str:
    """A table's topic: ``<prefix>.<db or schema>.<table>``."""
    return f"{source.topic_base}.{db}.{table}"


@dataclass
class TapStats:
    events: int = 0
    row_changes: int = 0
    messages: int = 0
    errors: int = 0
    transactions: int = 0
    checkpoints_saved: int = 0
    started: float = field(default_factory=time.monotonic)


class TapCore:
    """The state and steps both taps share; ``store`` is the source's checkpoint store."""

    producer: ChangelogProducer | None

    def __init__(self, settings: Settings, source: SourceConfig, store: CheckpointStore[Any],
                 stop: threading.Event | None = None) -> None:
        self.settings = settings
        self.source = source
        self.stop = stop or threading.Event()
        self.store = store
        self.registry_root = registry_root(settings, source)
        self.stats = TapStats()
        self.stopped: dict[str, dict[str, Any]] = {}
        self.rows = keys.RowCounts()
        self._last_save = 0.0
        self._known_topics: set[str] = set()
        self._conn: Any = None
        self.producer = None
        self.errors: ErrorSink | None = None

    def run(self, until_end: bool = False) -> TapStats:
        """Tap until stopped (signal) or, with ``until_end``, until the stream's end when it
        started."""
        if not self.store.try_lock():
            raise TapError(f"another tap (or bootstrap) of source '{self.source.name}' is "
                           f"running (lock {self.store.lock_path}); run one per source")
        try:
            return self._run(until_end)
        finally:
            self.store.release()
            self._close()

    def _run(self, until_end: bool) -> TapStats:
        raise NotImplementedError

    def _close(self) -> None:
        """Close the tap's connections (after a run, however it ended)."""

    # ---- producing --------------------------------------------------------------------

    def _start_producing(self, producer: ChangelogProducer) -> None:
        """The tap's producer, and the error topic and sink for what it cannot publish."""
        self.producer = producer
        broker_mod.ensure_topic(self.settings.broker.bootstrap_servers, error_topic(self.source),
                                self.source.partitions)
        self.errors = ErrorSink(producer, self.source, self.registry_root)

    def _register_shape(self, registry: Registry, previous: int | None, shape: TableShape) -> int:
        """Register a table's shape (a new version when columns were added or widened) and
        make its topic; returns the schema id."""
        schema_id = registry.register(shape)
        if previous is not None and schema_id != previous:
            log.info("table %s: columns added or widened, new schema version %d",
                     shape.qualified, schema_id)
        elif previous is None:
            log.info("table %s: keyed by %s (%s)", shape.qualified, shape.key.describe(),
                     shape.key.why)
        topic = topic_for(self.source, shape.db, shape.table)
        if topic not in self._known_topics:
            bootstrap = self.settings.broker.bootstrap_servers
            broker_mod.ensure_topic(bootstrap, topic, self.source.partitions)
            check_topic_limit(bootstrap, topic)  # else: the table stops
            self._known_topics.add(topic)
        return schema_id

    def _publish_changes(self, table: Any, changes: Iterable[Change],
                         where: tuple[Any, Any], env: Envelope) -> None:
        """Publish one event's changes (``where`` in the stream: for error records)."""
        assert self.producer is not None and self.errors is not None
        reported = self.errors.reported
        qualified = table.shape.qualified
        for change in changes:
            if publish(self.producer, table.topic, table.encoder, change,
                       table.shape.key.columns, self.errors, qualified, where, env):
                self.stats.messages += 1
        self.stats.errors += self.errors.reported - reported

    # ---- checkpoints ------------------------------------------------------------------

    def _due(self, force: bool) -> bool:
        """Whether a checkpoint is due (every checkpoint interval, or forced)."""
        return force or time.monotonic() - self._last_save >= self.source.checkpoint_interval_s

    def _maybe_save(self, force: bool = False) -> None:
        raise NotImplementedError

    def _where(self) -> str:
        """The last checkpoint saved, as the log shows it."""
        raise NotImplementedError

    def _finish(self) -> None:
        """Clean stop: every event produced is acknowledged, then the checkpoint is saved."""
        assert self.producer is not None
        self.producer.flush()
        self._maybe_save(force=True)
        self._finish_idle()
        log.info("tap of %s stopped cleanly at %s: %d row changes, %d messages, %d "
                 "transactions, %d error records", self.source.name, self._where(),
                 self.stats.row_changes, self.stats.messages, self.stats.transactions,
                 self.stats.errors)

    def _finish_idle(self) -> None:
        """After the last checkpoint of a clean stop: what the stream's end adds to it."""
