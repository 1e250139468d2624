"""Avro's binary encoding by hand, for the taps' generated per-table encoders.

A changelog message is ``0x00 | schema id | Avro body``; the body is every payload column as
the union ``["null", T]`` (branch 0: null, branch 1: the value), then the envelope
(registry.ENVELOPE_FIELDS). Avro's binary encoding is simple enough to write directly: longs
and ints as zigzag varints, strings and bytes length-prefixed, floats little endian, decimals
as the two's complement of the unscaled value (big endian). A generated encoder
(binlog/fastpath.py; postgres/fastpath.py has its own copy of the first ones) writes a row's
message from these pieces without building a record dict or calling fastavro; the general
path (tap/producer.py ``Encoder``) stays the reference both are compared with in the tests.
"""

from __future__ import annotations

from typing import Any

NULL = b"\x00"  # union branch 0: null
PRESENT = b"\x02"  # union branch 1 (zigzag 1): the value follows
SMALL = tuple(bytes([n]) for n in range(128))
PRESENT_SMALL = tuple(PRESENT + b for b in SMALL)  # a present value whose encoding is 1 byte
FALSE, TRUE = PRESENT + b"\x00", PRESENT + b"\x01"  # a present boolean


def varint(n: int) -> bytes:
    """Avro's variable-length encoding of a non-negative int (zigzag applied by the caller)."""
    if n < 128:
        return SMALL[n]
    if n < 16384:
        return bytes(((n & 127) | 128, n >> 7))
    if n < 2097152:
        return bytes(((n & 127) | 128, ((n >> 7) & 127) | 128, n >> 14))
    out = bytearray()
    while n >= 128:
        out.append((n & 127) | 128)
        n >>= 7
    out.append(n)
    return bytes(out)


def long_bytes(value: int) -> bytes:
    """An Avro long (or int): zigzag, then varint."""
    return varint((value << 1) ^ (value >> 63))


def present_long(value: int) -> bytes:
    """A present ``["null", "long"]`` value."""
    z = (value << 1) ^ (value >> 63)
    return PRESENT_SMALL[z] if z < 128 else PRESENT + varint(z)


WIDE = 1 << 35  # a zigzag value from here on takes more than five varint bytes


def wide_varint(z: int, memo: list[Any]) -> bytes:
    """``varint(z)`` of a large ``z`` (at least WIDE: timestamps in micros, ref keys): its
    first five bytes from the low 35 bits, the rest ``varint(z >> 35)``, which neighbouring
    values share (``memo``: ``[z >> 35, its bytes]``, kept by the caller)."""
    high = z >> 35
    if high != memo[0]:
        memo[1] = varint(high)
        memo[0] = high
    return bytes((z & 127 | 128, z >> 7 & 127 | 128, z >> 14 & 127 | 128, z >> 21 & 127 | 128,
                  z >> 28 & 127 | 128)) + memo[1]


def text_bytes(value: str) -> bytes:
    """An Avro string: its UTF-8 length, then the bytes."""
    data = value.encode("utf-8")
    return varint(len(data) << 1) + data


def unscaled_bytes(unscaled: int) -> bytes:
    """An Avro decimal's bytes of its unscaled value (two's complement, big endian; as
    producer.decimal_bytes writes a Decimal of the schema's scale)."""
    return unscaled.to_bytes((unscaled.bit_length() + 8) // 8, "big", signed=True)


def envelope_tail(source: str, event_ts_ms: int, data_center: str | None,
                  deleted: bool) -> bytes:
    """The envelope fields after ``_ref_key`` (registry.ENVELOPE_FIELDS): _changed_columns
    null, _source, _event_ts, _is_deleted, _force_update false, _data_center."""
    return b"".join((NULL, text_bytes(source), long_bytes(event_ts_ms), b"\x01" if deleted
                     else b"\x00", b"\x00", NULL if data_center is None
                     else PRESENT + text_bytes(data_center)))
