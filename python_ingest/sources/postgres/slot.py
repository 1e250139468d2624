"""Where the tap starts: its checkpoint in its slot, or the slot's position (the slot created
when missing); and the refusals when they do not fit (a slot gone, of another plugin or
database, or one that lost WAL)."""

from __future__ import annotations

import logging
from typing import Any

from python_ingest.config import SourceConfig
from python_ingest.config.source_kinds import PostgresOptions
from python_ingest.exceptions import TapError
from python_ingest.sources.postgres import server
from python_ingest.sources.postgres.position import PgCheckpoint, PgCheckpointStore, lsn_text

log = logging.getLogger(__name__)


def start_position(conn: Any, source: SourceConfig, store: PgCheckpointStore
                   ) -> tuple[int, PgCheckpoint | None]:
    """The LSN to stream from, and the checkpoint it comes from (None: a new start, whose
    checkpoint is written here)."""
    pg = source.of(PostgresOptions)
    slot = pg.slot_name
    checkpoint = store.load()
    info = server.slot_info(conn, slot)
    if info is not None and info["plugin"] != "pgoutput":
        raise TapError(f"source {source.name}: the replication slot {slot} uses the plugin "
                       f"{info['plugin']}, the tap reads pgoutput: name another slot "
                       f"(sources.{source.name}.slot) or drop this one")
    if info is not None and info["database"] != pg.database:
        raise TapError(f"source {source.name}: the replication slot {slot} belongs to database "
                       f"{info['database']}, the source reads {pg.database}: name another "
                       f"slot (sources.{source.name}.slot)")
    if checkpoint is not None:
        if info is None or checkpoint.slot != slot:
            raise TapError(
                f"source {source.name}: the replication slot {slot} is gone (the checkpoint "
                f"{store.path} is at {lsn_text(checkpoint.lsn)} in slot {checkpoint.slot}): "
                f"the changes since are lost to the tap. Start over with `sluice bootstrap "
                f"{source.name} all`: it creates the slot and copies every tapped table again "
                "(docs/postgres-source.md)")
        confirmed = info["confirmed_flush"] or 0
        if confirmed > checkpoint.lsn:
            raise TapError(
                f"source {source.name}: the replication slot {slot} is confirmed up to "
                f"{lsn_text(confirmed)}, past the tap's checkpoint {lsn_text(checkpoint.lsn)} "
                f"({store.path}): the server will not send the transactions between them "
                "again, and they may never have reached Kafka (a checkpoint file restored from "
                "an older backup, another program reading the slot, or a tap before sluice "
                "confirmed only its checkpoints). Restore the newest checkpoint file if there "
                f"is one; else stop every tap of the source, drop the slot (SELECT "
                f"pg_drop_replication_slot('{slot}')) and run `sluice bootstrap {source.name} "
                "all`: a new slot and a copy of every tapped table (docs/postgres-source.md)")
        if info["wal_status"] == "lost":
            raise TapError(f"source {source.name}: the slot {slot} lost WAL it needed "
                           "(max_slot_wal_keep_size): drop it and start over as for a missing "
                           "slot (docs/postgres-source.md)")
        return checkpoint.lsn, checkpoint
    if info is None:
        repl = server.replication_connect(source)
        try:
            start, _ = server.create_slot(repl, slot)
        finally:
            repl.close()
        log.info("source %s: created the replication slot %s at %s", source.name, slot,
                 lsn_text(start))
    else:
        start = info["confirmed_flush"] or 0
    store.save(PgCheckpoint(start, slot))
    return start, None
