"""Debezium PostgreSQL events captured from the real producer (issue #58): Debezium's PostgreSQL
connector (pgoutput) on Kafka Connect with JsonConverter (schemas on), as
tests/sources/debezium/test_connect_postgres.py runs it, saved under ``cases/`` with the tables
PostgreSQL held at the end.

What the events hold (``SCRIPT`` in test_connect_postgres.py):

- ``orders``: a transaction in flight when the snapshot was read (the slot made before it),
  committed after it; and a long transaction updating row 1 twice with more than 1 MiB of
  WAL between the updates, row 5 once, then writing about 70 MiB of WAL, updating row 6
  twice (1.9 MiB apart), while another transaction commits, then row 5 again: rows 1 and 5's
  first updates were written more than 64 MiB before the commit Debezium streamed before
  theirs (``source.sequence``'s first LSN), row 6's within it. The lake must keep the later
  updates.
- ``ledger`` (messages only): its initial snapshot, then an incremental snapshot's reads
  (``execute-snapshot`` signal; no ``source.lsn``) taken while the long transaction, which
  changed row 1 first, was open, then that change; then a blocking snapshot's reads (a
  second signal) between two changes of row 2.
- ``notes`` (REPLICA IDENTITY DEFAULT, ``body`` and ``raw`` stored out of line): updates that
  leave TOASTed columns unchanged carry ``__debezium_unavailable_value`` for them; a
  ``numeric(3,5)`` column (scale above precision, PostgreSQL 15).

``check`` replays the captured messages through sluice's decoder as a JSON job would (the
scaffold's schema from the events) and folds them by ``_ref_key`` as the merge does: equal ref
keys of one row are one change (the first kept), a partial update keeps the columns it lacks.

Capture again with ``SLUICE_SAVE_DEBEZIUM_CASES=1 pytest
tests/sources/debezium/test_connect_postgres.py``.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

from tests.sources.debezium.cases import json_decoder

FILE = Path(__file__).parent / "cases" / "postgres_json_ordering_toast.json"
TABLES = {"orders": ("id", "v"), "notes": ("id", "body", "raw", "n", "tiny")}


def plain(value: Any) -> Any:
    """A PostgreSQL or lake value as JSON (decimals as text, bytes as hex)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, Decimal):
        return format(value, "f")
    return value


def table_rows(rows: list[tuple[Any, ...]], columns: tuple[str, ...]) -> dict[str, Any]:
    """SELECT rows by id, as ``plain`` values."""
    return {str(r[0]): dict(zip(columns, map(plain, r), strict=True)) for r in rows}


def save(messages: dict[str, list[bytes]], tables: dict[str, Any], notes: dict[str, Any]) -> None:
    """Write the captured messages (value texts per table) and the tables at the end."""
    FILE.parent.mkdir(exist_ok=True)
    FILE.write_text(json.dumps({
        "producer": "Debezium 3.5.0.Final PostgresConnector (pgoutput) on Kafka Connect "
                    "4.1.1, PostgreSQL 15, JsonConverter schemas.enable=true "
                    "(tests/sources/debezium/test_connect_postgres.py)",
        "notes": notes,
        "messages": {t: [v.decode() for v in values] for t, values in messages.items()},
        "tables": tables}, indent=1) + "\n")


def load() -> tuple[dict[str, list[bytes]], dict[str, Any]]:
    data = json.loads(FILE.read_text())
    return ({t: [v.encode() for v in values] for t, values in data["messages"].items()},
            data["tables"])


def decoder(values: list[bytes], table: str) -> Any:
    """A ``value_format: json`` Debezium job's decoder for ``table``, its row schema as the
    scaffold writes it from the events (no config file)."""
    from python_ingest.sources.debezium.topics import connect_to_avro, merged_row

    rows = [connect_to_avro(next(f for f in json.loads(v)["schema"]["fields"]
                                 if f["field"] == "after")) for v in values]
    return json_decoder(merged_row(rows), table)


def fold(values: list[bytes], table: str) -> dict[str, Any]:
    """The captured events of ``table`` decoded and merged by ``_ref_key`` (the lake)."""
    columns = TABLES[table]
    read = decoder(values, table)
    lake: dict[str, tuple[int, dict[str, Any] | None]] = {}
    for value in values:
        row = read.decode(value)
        key = str(row["id"])
        if key in lake and lake[key][0] >= row["_ref_key"]:
            continue  # not newer: a copy of a change merged already, or an older change
        changed = row["_changed_columns"] or columns
        old = lake.get(key, (0, None))[1] or {}
        image = None if row["_is_deleted"] else {
            c: plain(row.get(c)) if c in changed else old.get(c) for c in columns}
        lake[key] = (row["_ref_key"], image)
    return {k: image for k, (_, image) in lake.items() if image is not None}


def check(messages: dict[str, list[bytes]], tables: dict[str, Any]) -> None:
    """Every captured table through sluice's decoder ends equal to PostgreSQL's."""
    for table in TABLES:
        assert fold(messages[table], table) == tables[table], table
