"""What ``sluice status`` says about each PostgreSQL source: its slot, how much WAL the slot
holds back on the server (the bytes from its restart LSN to the server's WAL end), and a
warning past ``slot_lag_warn_bytes``: a stopped tap makes the server keep WAL until its disk
fills (docs/postgres-source.md, "Operations"). ``PgStatus`` is the kind's status part
(sources/tap/kinds.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from python_ingest.config import Settings, SourceConfig
from python_ingest.config.source_kinds import PostgresOptions
from python_ingest.exceptions import SluiceError
from python_ingest.sources.postgres import server
from python_ingest.sources.postgres.position import PgCheckpointStore, lsn_text
from python_ingest.sources.tap.kinds import SourceStatus


class PgStatus(SourceStatus):
    """Each PostgreSQL source's slot and the WAL it holds back."""

    def status(self, settings: Settings, sources: Sequence[SourceConfig]
               ) -> dict[str, dict[str, Any]]:
        return source_status(settings, sources)

    def lines(self, name: str, entry: dict[str, Any]) -> list[str]:
        return source_lines(name, entry)


def source_status(settings: Settings, sources: Sequence[SourceConfig]
                  ) -> dict[str, dict[str, Any]]:
    """Per PostgreSQL source: slot, active, retained_bytes, confirmed and checkpoint LSNs,
    warning; or error when the server cannot be asked."""
    out: dict[str, dict[str, Any]] = {}
    warned: set[str] = set()  # servers whose unused slots are listed already
    for source in sources:
        name, pg = source.name, source.of(PostgresOptions)
        entry: dict[str, Any] = {"slot": pg.slot_name}
        try:
            checkpoint = PgCheckpointStore(settings.path(settings.state_dir), name).load()
            entry["checkpoint_lsn"] = lsn_text(checkpoint.lsn) if checkpoint else None
            conn = server.connect(source)
            try:
                info = server.slot_info(conn, pg.slot_name)
            finally:
                conn.close()
        except SluiceError as exc:
            entry["error"] = str(exc)
            out[name] = entry
            continue
        if info is None:
            entry["error"] = (f"no slot {pg.slot_name}: `sluice tap {name}` or `sluice "
                              f"bootstrap {name} all` creates it")
        else:
            entry.update(active=info["active"], retained_bytes=info["retained_bytes"],
                         confirmed_lsn=lsn_text(info["confirmed_flush"])
                         if info["confirmed_flush"] else None, wal_status=info["wal_status"])
            if info["retained_bytes"] > pg.slot_lag_warn_bytes:
                entry["warning"] = (f"the slot holds {info['retained_bytes']:,} bytes of WAL "
                                    f"(over {pg.slot_lag_warn_bytes:,}): start `sluice tap "
                                    f"{name}`, or drop the slot if the source is retired")
        try:
            conn = server.connect(source)
            try:
                unused = unused_slots(conn, settings, source)
            finally:
                conn.close()
        except SluiceError:
            unused = []
        server_name = f"{source.host}:{source.port}"
        if unused and server_name not in warned:  # once per server
            warned.add(server_name)
            entry["unused_slots"] = [unused_warning(slot) for slot in unused]
        out[name] = entry
    return out


def unused_slots(conn: Any, settings: Settings, source: SourceConfig) -> list[dict[str, Any]]:
    """The sluice slots (named ``sluice_...``, pgoutput, not temporary) on ``source``'s
    server that no PostgreSQL source of the config on that server reads: most likely left by a
    source removed from the config. They keep WAL on the server (every database's) until
    dropped."""
    used = {s.options.slot_name for s in settings.sources.values()
            if isinstance(s.options, PostgresOptions) and
            (s.host, s.port) == (source.host, source.port)}
    found = server.rows(
        conn, "SELECT slot_name, database, active, pg_wal_lsn_diff(pg_current_wal_lsn(), "
              "restart_lsn)::bigint FROM pg_replication_slots WHERE plugin = 'pgoutput' AND "
              "slot_name LIKE 'sluice\\_%' AND NOT temporary ORDER BY slot_name")
    return [{"slot": slot, "database": database, "active": bool(active),
             "retained_bytes": int(retained or 0)}
            for slot, database, active, retained in found if slot not in used]


def unused_warning(slot: dict[str, Any]) -> str:
    return (f"the slot {slot['slot']} (database {slot['database']}) is read by no source of "
            f"this config and holds {slot['retained_bytes']:,} bytes of WAL on the server: if "
            f"its source was removed, drop it (SELECT pg_drop_replication_slot('{slot['slot']}') "
            f"in database {slot['database']}, with no tap of it running)")


def source_lines(name: str, entry: dict[str, Any]) -> list[str]:
    """The lines ``sluice status`` prints of one PostgreSQL source."""
    if "error" in entry:
        lines = [f"source {name} (postgres): {entry['error']}"]
    else:
        lines = [f"source {name} (postgres): slot {entry['slot']} "
                 f"{'streaming' if entry['active'] else 'idle'}, holds "
                 f"{entry['retained_bytes']:,} bytes of WAL, confirmed {entry['confirmed_lsn']}, "
                 f"checkpoint {entry['checkpoint_lsn']}"]
        if entry.get("warning"):
            lines.append(f"  WARNING: {entry['warning']}")
    return lines + [f"  WARNING: {warning}" for warning in entry.get("unused_slots", [])]
