"""Binlog events the tap cannot read, named with the server setting that writes them.

mysql-replication hands over only the event classes asked for (``only_events``) and drops the
rest without a word, including every event type it has no class for (``NotImplementedEvent``,
also dropped unless ``filter_non_implemented_events=False``). So a server writing row changes
in a form the library does not parse lost them silently: MariaDB's ``log_bin_compress=ON``
writes compressed rows events (types 166-171) and compressed query events (165), MySQL's
``binlog_row_value_options=PARTIAL_JSON`` writes ``PARTIAL_UPDATE_ROWS_EVENT`` (39, a class
the tap did not ask for), MySQL's ``binlog_transaction_compression=ON`` a transaction payload
event (40) holding the transaction's events. The tap asks for those too and stops on the
first one (``unreadable``), naming the setting; ``check_server`` (server.py) refuses such a
server at start. Other event types the library has no class for stop the tap as well, unless
the server marks them ignorable (``LOG_EVENT_IGNORABLE_F``) or they are known to carry no row
change (``HARMLESS``). Classes the library parses but the tap does not ask for carry no row
change of a ROW-format binlog, except ``ExecuteLoadQueryEvent`` (a statement-format ``LOAD
DATA``), which stops the tap too.
"""

from __future__ import annotations

from typing import Any

LOG_EVENT_IGNORABLE_F = 0x80  # the header flag: a server may skip the event (MySQL, MariaDB)
PARTIAL_UPDATE_ROWS_EVENT, TRANSACTION_PAYLOAD_EVENT = 39, 40
MARIADB_COMPRESSED = {165: "QUERY_COMPRESSED_EVENT", 166: "WRITE_ROWS_COMPRESSED_EVENT_V1",
                      167: "UPDATE_ROWS_COMPRESSED_EVENT_V1",
                      168: "DELETE_ROWS_COMPRESSED_EVENT_V1", 169: "WRITE_ROWS_COMPRESSED_EVENT",
                      170: "UPDATE_ROWS_COMPRESSED_EVENT", 171: "DELETE_ROWS_COMPRESSED_EVENT"}
# types with no class in the library that carry no row change and no transaction end
HARMLESS = {0x1C: "IGNORABLE_LOG_EVENT", 0x22: "ANONYMOUS_GTID_LOG_EVENT",
            0x24: "TRANSACTION_CONTEXT_EVENT", 0x25: "VIEW_CHANGE_EVENT",
            0x29: "HEARTBEAT_LOG_EVENT_V2",
            0x2A: "GTID_TAGGED_LOG_EVENT"}  # MySQL 8.4; the tap resumes MySQL by file/position
# (setting that writes them, what to set instead)
SETTINGS = {
    PARTIAL_UPDATE_ROWS_EVENT: ("binlog_row_value_options=PARTIAL_JSON",
                                "binlog_row_value_options=''"),
    TRANSACTION_PAYLOAD_EVENT: ("binlog_transaction_compression=ON",
                                "binlog_transaction_compression=OFF"),
    **{t: ("log_bin_compress=ON", "log_bin_compress=OFF") for t in MARIADB_COMPRESSED},
}


def extra_events() -> list[Any]:
    """The event classes the tap asks for beyond those it publishes from, to stop on them."""
    from pymysqlreplication.event import ExecuteLoadQueryEvent, NotImplementedEvent
    from pymysqlreplication.row_event import PartialUpdateRowsEvent

    return [NotImplementedEvent, PartialUpdateRowsEvent, ExecuteLoadQueryEvent]


def unreadable(event: Any) -> str | None:
    """Why the tap must stop at ``event`` (one of ``extra_events``), None to skip it."""
    from pymysqlreplication.event import ExecuteLoadQueryEvent

    packet = event.packet
    kind, flags = int(packet.event_type), int(packet.flags)
    if isinstance(event, ExecuteLoadQueryEvent):
        return ("a statement-format LOAD DATA (EXECUTE_LOAD_QUERY_EVENT): its rows are not in "
                "the binlog. Keep binlog_format=ROW in every session writing tapped tables, "
                "then bootstrap the tables it loaded")
    if kind in SETTINGS:
        setting, instead = SETTINGS[kind]
        name = MARIADB_COMPRESSED.get(kind) or ("PARTIAL_UPDATE_ROWS_EVENT"
                                                if kind == PARTIAL_UPDATE_ROWS_EVENT
                                                else "TRANSACTION_PAYLOAD_EVENT")
        return (f"a {name} (event type {kind}), which the server writes with {setting}: the "
                f"tap cannot read its row changes. Set {instead} (SET GLOBAL and in the server "
                "config), then start the tap from the binlog's current end and bootstrap the "
                "tapped tables (docs/binlog-tap.md, \"Pointing the tap at a server\")")
    if kind in HARMLESS or flags & LOG_EVENT_IGNORABLE_F:
        return None
    return (f"a binlog event of type {kind}, which the tap does not know: it may hold row "
            "changes the tap would lose. Check the server's binlog settings against "
            "docs/binlog-tap.md (\"Pointing the tap at a server\")")
