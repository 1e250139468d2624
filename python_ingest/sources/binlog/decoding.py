"""Reading row values from the binlog exactly as the server stored them.

mysql-replication decodes values itself and loses some on the way: zero and partial-zero
dates become None (a zero TIMESTAMP 1970-01-01), negative TIME with a fraction gets the
fraction wrong, YEAR 0000 becomes 1900, ENUM/SET member names in a non-UTF-8 charset become
'', an empty SET becomes None, BIT becomes a string of digits, text is decoded with Python's
codecs, which are not the server's (latin1 is cp1252 plus five more code points).

``install()`` replaces the library's value reader (one private method of ``RowsEvent``) with
``read_value`` below, which hands over what the binlog holds: integers, floats and Decimals as
the library reads them, but bytes for every string type (decoded later with the column's own
charset, ``charsets.Charsets``), the ENUM index and SET bit mask, the BIT bytes, and the raw
parts of temporal values (``values.RawDate`` ...), which ``columns.to_avro`` maps to their
Avro values and the zero-date policy. It also keeps, per column of a table map, whether the
column is nullable and its charset's collation id, and ENUM/SET member names as bytes.

The library is pinned (requirements.lock); ``install`` checks that the methods it replaces
are there and fails naming the version otherwise.
"""

from __future__ import annotations

import struct
from typing import Any

from python_ingest.exceptions import SetupError
from python_ingest.sources.binlog.values import RawDate, RawDateTime, RawTime, RawTimestamp

# MySQL's enum_field_types
TINY, SHORT, LONG, FLOAT, DOUBLE, TIMESTAMP, LONGLONG, INT24 = 1, 2, 3, 4, 5, 7, 8, 9
DATE, TIME, DATETIME, YEAR, NEWDATE, VARCHAR, BIT = 10, 11, 12, 13, 14, 15, 16
TIMESTAMP2, DATETIME2, TIME2, JSON, NEWDECIMAL, ENUM, SET = 17, 18, 19, 245, 246, 247, 248
TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, BLOB, VAR_STRING, STRING, GEOMETRY = (249, 250, 251, 252,
                                                                        253, 254, 255)
_INTS = {TINY: ("<B", "<b", 1), SHORT: ("<H", "<h", 2), LONG: ("<I", "<i", 4),
         LONGLONG: ("<Q", "<q", 8)}
_installed = False


def _fraction(packet: Any, fsp: int) -> int:
    """Microseconds of a DATETIME2/TIMESTAMP2 fraction (big endian, 0..3 bytes)."""
    if fsp <= 0:
        return 0
    size = (fsp + 1) // 2
    value = int.from_bytes(packet.read(size), "big")
    return value * (10_000, 100, 1)[size - 1]


def _time2(packet: Any, fsp: int) -> RawTime:
    """MySQL 5.6+ TIME (my_time_packed_from_binary): negative values keep their fraction."""
    if fsp >= 5:
        packed = int.from_bytes(packet.read(6), "big") - 0x800000000000
    else:
        intpart = int.from_bytes(packet.read(3), "big") - 0x800000
        frac = 0
        if fsp >= 1:
            size = 1 if fsp <= 2 else 2
            frac = int.from_bytes(packet.read(size), "big")
            if intpart < 0 and frac:
                intpart += 1
                frac -= 1 << (8 * size)
            frac *= 10_000 if size == 1 else 100
        packed = (intpart << 24) + frac
    negative = packed < 0
    packed = abs(packed)
    hms, micro = packed >> 24, packed % (1 << 24)
    seconds = ((hms >> 12) % (1 << 10)) * 3600 + ((hms >> 6) % 64) * 60 + hms % 64
    micros = seconds * 1_000_000 + micro
    return RawTime(-micros if negative else micros)


def _old_datetime(value: int) -> RawDateTime:
    """Pre-5.6 DATETIME: the decimal digits YYYYMMDDhhmmss in a 64-bit integer."""
    day, time = divmod(value, 1_000_000)
    return RawDateTime(day // 10_000, day // 100 % 100, day % 100, time // 10_000,
                       time // 100 % 100, time % 100, 0)


def read_value(event: Any, column: Any, unsigned: bool, is_partial: bool) -> Any:
    """One non-null value of ``column`` at the packet's position (see the module doc)."""
    packet = event.packet
    t = column.type
    if t in _INTS:
        fmt_unsigned, fmt_signed, size = _INTS[t]
        return struct.unpack(fmt_unsigned if unsigned else fmt_signed, packet.read(size))[0]
    if t == INT24:
        return packet.read_uint24() if unsigned else packet.read_int24()
    if t == FLOAT:
        return struct.unpack("<f", packet.read(4))[0]
    if t == DOUBLE:
        return struct.unpack("<d", packet.read(8))[0]
    if t in (VARCHAR, VAR_STRING, STRING):
        return bytes(packet.read_length_coded_pascal_string(2 if column.max_length > 255 else 1))
    if t in (BLOB, TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, GEOMETRY):
        return bytes(packet.read_length_coded_pascal_string(column.length_size))
    if t == NEWDECIMAL:
        return event._RowsEvent__read_new_decimal(column)
    if t == DATETIME2:
        v = int.from_bytes(packet.read(5), "big")
        year_month = (v >> 22) & 0x1FFFF
        return RawDateTime(year_month // 13, year_month % 13, (v >> 17) & 31, (v >> 12) & 31,
                           (v >> 6) & 63, v & 63, _fraction(packet, column.fsp))
    if t == TIMESTAMP2:
        seconds = int.from_bytes(packet.read(4), "big")
        return RawTimestamp(seconds, _fraction(packet, column.fsp))
    if t == TIME2:
        return _time2(packet, column.fsp)
    if t in (DATE, NEWDATE):
        v = packet.read_uint24()
        return RawDate(v >> 9, (v >> 5) & 15, v & 31)
    if t == DATETIME:
        return _old_datetime(packet.read_uint64())
    if t == TIMESTAMP:
        return RawTimestamp(packet.read_uint32(), 0)
    if t == TIME:
        v = packet.read_int24()
        a = abs(v)
        micros = ((a // 10_000) * 3600 + (a // 100 % 100) * 60 + a % 100) * 1_000_000
        return RawTime(-micros if v < 0 else micros)
    if t == YEAR:
        v = packet.read_uint8()
        return 0 if v == 0 else v + 1900
    if t in (ENUM, SET):
        return packet.read_uint_by_size(column.size)
    if t == BIT:
        return bytes(packet.read(column.bytes))
    if t == JSON:
        return packet.read_binary_json(column.length_size, is_partial)
    raise NotImplementedError(f"binlog column type {t} of column {column.name!r}")


def _read_values_name(self: Any, column: Any, null_bitmap: Any, null_bitmap_index: int,
                      is_partial: bool, cols_bitmap: Any, unsigned: bool, i: int) -> Any:
    from pymysqlreplication.bitmap import BitGet

    if BitGet(cols_bitmap, i) == 0 or self._is_null(null_bitmap, null_bitmap_index):
        return None
    return read_value(self, column, unsigned, is_partial)


def _read_type_values(self: Any, length: int) -> list[list[bytes]] | None:
    """ENUM/SET member names as the bytes the server wrote (in the column's charset)."""
    result = []
    read_until = self.packet.read_bytes + length
    if self.packet.read_bytes >= read_until:
        return None
    while self.packet.read_bytes < read_until:
        count = self.packet.read_length_coded_binary()
        result.append([bytes(self.packet.read_variable_length_string()) for _ in range(count)])
    return result


def _column_details(self: Any) -> None:
    """After the library's own pass: nullability and collation id of every column."""
    meta = self.optional_metadata
    texts = list(getattr(meta, "charset_collation_list", None) or [])
    enums = list(getattr(meta, "enum_and_set_collation_list", None) or [])
    for index, column in enumerate(self.columns):
        column.nullable = bool(self.null_bitmask[index // 8] & (1 << (index % 8)))
        column.collation_id = None
        if self._is_character_column(column.type, dbms=self.dbms) and texts:
            column.collation_id = texts.pop(0)
        elif self._is_enum_or_set_column(column.type) and enums:
            column.collation_id = enums.pop(0)


def install() -> None:
    """Make mysql-replication hand over exact values (idempotent)."""
    global _installed
    if _installed:
        return
    from pymysqlreplication.row_event import RowsEvent, TableMapEvent

    needed = [(RowsEvent, "_RowsEvent__read_values_name"),
              (RowsEvent, "_RowsEvent__read_new_decimal"),
              (TableMapEvent, "_read_type_values"), (TableMapEvent, "_sync_column_info")]
    missing = [name for cls, name in needed if not hasattr(cls, name)]
    if missing:
        import importlib.metadata

        version = importlib.metadata.version("mysql-replication")
        raise SetupError(f"mysql-replication {version} lacks {', '.join(missing)}: the tap reads "
                         "values with the version pinned in requirements.lock (1.0.17)")
    original_sync = TableMapEvent._sync_column_info

    def sync_column_info(self: Any) -> None:
        original_sync(self)
        _column_details(self)

    RowsEvent._RowsEvent__read_values_name = _read_values_name
    TableMapEvent._read_type_values = _read_type_values
    TableMapEvent._sync_column_info = sync_column_info
    _installed = True
