"""Debezium events captured from the real producer (issue #50): Debezium's MariaDB connector on
Kafka Connect with JsonConverter (schemas on), as tests/sources/debezium/test_connect.py runs
it, saved under ``cases/`` with the table MariaDB held at the end.

The ``kinds`` table has the columns whose JSON form went wrong (DOUBLE and FLOAT, BLOB,
decimals whose base64 text reads as a number, DATETIME before 1970), and gains a column while
the connector streams (``ALTER TABLE kinds ADD tip decimal(10,2)``). ``check_kinds`` replays
the captured messages through sluice's decoder as a job would: the scaffold's schema from the
first event stops at the first event with ``tip``; the schema the scaffold writes from all of
them lands every event, and the rows folded by ``_ref_key`` equal the table.

Capture again with ``SLUICE_SAVE_DEBEZIUM_CASES=1 pytest tests/sources/debezium/test_connect.py``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

CASES = Path(__file__).parent / "cases"
KINDS_FILE = CASES / "mariadb_json_kinds.json"
KINDS_DDL = ("CREATE TABLE {db}.kinds (id INT PRIMARY KEY, rating DOUBLE, weight FLOAT, "
             "data BLOB, price DECIMAL(10,2), tiny DECIMAL(20,10), born DATETIME(6))")
KINDS_ROWS = [  # the snapshot's rows
    (1, 4.5, 1.25, bytes.fromhex("f536"), Decimal("-26630.51"), Decimal("-0.0000766083"),
     "1969-12-31 23:59:59.500000"),
    (2, -1e300, -0.5, b"", Decimal("0.00"), Decimal("0.0000000001"),
     "1900-01-01 00:00:00.000001"),
    (3, None, None, None, None, None, None),
]
KINDS_STREAM = [  # while the connector streams
    "UPDATE {db}.kinds SET rating = 2.0, data = x'00ff' WHERE id = 1",
    "ALTER TABLE {db}.kinds ADD tip DECIMAL(10,2)",
    "INSERT INTO {db}.kinds (id, rating, price, tip) VALUES (4, 0.1, 12.34, -3.25)",
    "UPDATE {db}.kinds SET tip = 7.50 WHERE id = 2",
    "DELETE FROM {db}.kinds WHERE id = 3",
]
LAST_TIP = b'"tip":"Au4="'  # the last statement with a tip: 7.50 (unscaled 750, base64)
COLUMNS = ("id", "rating", "weight", "data", "price", "tiny", "born", "tip")


def plain(value: Any) -> Any:
    """A MariaDB or lake value as JSON (exact: decimals and floats as text, bytes as hex)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, datetime):
        return value.replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float):
        return repr(value)
    return value


def table_rows(rows: list[tuple[Any, ...]]) -> dict[str, dict[str, Any]]:
    """SELECT id, rating, ... rows by id, as ``plain`` values."""
    return {str(r[0]): dict(zip(COLUMNS, map(plain, r), strict=True)) for r in rows}


def save(messages: list[tuple[bytes | None, bytes | None]], table: dict[str, Any]) -> None:
    """Write the captured messages (key, value texts) and the table MariaDB ended with."""
    CASES.mkdir(exist_ok=True)
    KINDS_FILE.write_text(json.dumps({
        "producer": "Debezium 3.5.0.Final MariaDbConnector on Kafka Connect 4.1.1, "
                    "JsonConverter schemas.enable=true (tests/sources/debezium/test_connect.py)",
        "messages": [[None if k is None else k.decode(), None if v is None else v.decode()]
                     for k, v in messages],
        "table": table}, indent=1) + "\n")


def load() -> tuple[list[tuple[bytes | None, bytes | None]], dict[str, Any]]:
    data = json.loads(KINDS_FILE.read_text())
    return ([(None if k is None else k.encode(), None if v is None else v.encode())
             for k, v in data["messages"]], data["table"])


def json_decoder(row: dict[str, Any], table: str = "kinds") -> Any:
    """A ``value_format: json`` Debezium job's decoder of ``table`` reading ``row`` (its row
    schema as the scaffold writes it; no config file)."""
    from python_ingest.changelog import debezium
    from python_ingest.changelog.decode import Decoder
    from python_ingest.changelog.schema import ENVELOPE, ChangelogSchema, spark_type

    avro, fmt = debezium.flat_schema(row, table, "json")
    fields = {f["name"]: f["type"] for f in avro["fields"]}
    payload = tuple((n, spark_type(t, n)) for n, t in fields.items()
                    if n not in ENVELOPE and n != debezium.REF_KEY)
    schema = ChangelogSchema(avro=avro, payload=payload, row_key=("id",),
                             ref_key=debezium.REF_KEY, writer_schemas={}, confluent=False)
    return Decoder(replace(schema, debezium=fmt))


def check_kinds(messages: list[tuple[bytes | None, bytes | None]],
                table: dict[str, Any]) -> None:
    """The captured events through sluice as a JSON job: stop at the added column with the
    first event's schema, land everything with the merged one, end equal to ``table``."""
    import pytest

    from python_ingest.exceptions import ReadError
    from python_ingest.sources.debezium.topics import connect_to_avro, merged_row

    values = [v for _, v in messages if v]
    rows = []
    for value in values:
        after = next(f for f in json.loads(value)["schema"]["fields"] if f["field"] == "after")
        rows.append(connect_to_avro(after))
    first = json_decoder(rows[0])
    with_tip = [i for i, v in enumerate(values) if b'"field":"tip"' in v]
    assert with_tip, "no event carries the added column"
    for value in values[:with_tip[0]]:
        first.decode(value)
    with pytest.raises(ReadError, match=r"column\(s\) tip"):
        first.decode(values[with_tip[0]])
    decoder = json_decoder(merged_row(rows))
    lake: dict[str, tuple[int, dict[str, Any] | None]] = {}
    for value in values:
        row = decoder.decode(value)
        key = row["_row_key"]
        if key in lake and lake[key][0] >= row["_ref_key"]:
            continue
        image = None if row["_is_deleted"] else {c: plain(row.get(c)) for c in COLUMNS}
        lake[key] = (row["_ref_key"], image)
    landed = {k: image for k, (_, image) in lake.items() if image is not None}
    assert landed == table
