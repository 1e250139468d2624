"""What ``sluice status`` says about each PostgreSQL source: its slot, how much WAL the slot
holds back on the server (the bytes from its restart LSN to the server's WAL end), and a
warning past ``slot_lag_warn_bytes``: a stopped tap makes the server keep WAL until its disk
fills (docs/postgres-source.md, "Operations")."""

from __future__ import annotations

from typing import Any

from python_ingest.config import Settings
from python_ingest.exceptions import SluiceError
from python_ingest.sources.postgres import server
from python_ingest.sources.postgres.position import PgCheckpointStore, lsn_text


def source_status(settings: Settings) -> dict[str, dict[str, Any]]:
    """Per PostgreSQL source: slot, active, retained_bytes, confirmed and checkpoint LSNs,
    warning; or error when the server cannot be asked."""
    out: dict[str, dict[str, Any]] = {}
    for name, source in sorted(settings.sources.items()):
        if source.kind != "postgres":
            continue
        entry: dict[str, Any] = {"slot": source.slot_name}
        try:
            checkpoint = PgCheckpointStore(settings.path(settings.state_dir), name).load()
            entry["checkpoint_lsn"] = lsn_text(checkpoint.lsn) if checkpoint else None
            conn = server.connect(source)
            try:
                info = server.slot_info(conn, source.slot_name)
            finally:
                conn.close()
        except SluiceError as exc:
            entry["error"] = str(exc)
            out[name] = entry
            continue
        if info is None:
            entry["error"] = (f"no slot {source.slot_name}: `sluice tap {name}` or `sluice "
                              f"bootstrap {name} all` creates it")
        else:
            entry.update(active=info["active"], retained_bytes=info["retained_bytes"],
                         confirmed_lsn=lsn_text(info["confirmed_flush"])
                         if info["confirmed_flush"] else None, wal_status=info["wal_status"])
            if info["retained_bytes"] > source.slot_lag_warn_bytes:
                entry["warning"] = (f"the slot holds {info['retained_bytes']:,} bytes of WAL "
                                    f"(over {source.slot_lag_warn_bytes:,}): start `sluice tap "
                                    f"{name}`, or drop the slot if the source is retired")
        out[name] = entry
    return out


def print_sources(sources: dict[str, dict[str, Any]]) -> None:
    for name, entry in sources.items():
        if "error" in entry:
            print(f"source {name} (postgres): {entry['error']}")
            continue
        print(f"source {name} (postgres): slot {entry['slot']} "
              f"{'streaming' if entry['active'] else 'idle'}, holds "
              f"{entry['retained_bytes']:,} bytes of WAL, confirmed {entry['confirmed_lsn']}, "
              f"checkpoint {entry['checkpoint_lsn']}")
        if entry.get("warning"):
            print(f"  WARNING: {entry['warning']}")
