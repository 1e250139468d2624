"""The binlog fast path's columns (fastpath.py): per binlog column type, the generated lines
that read its value from a row image and write its Avro bytes, and the helpers they call.

Values are read as ``decoding.read_value`` reads them. Temporal values go through
``columns.to_avro`` itself (the zero-date policy), cached per distinct value; a DATETIME2 of a
valid date is computed inline from its date's day (memoized per date). A column type or kind
not handled here raises ``Unsupported``: its table takes the general path.

The memos (a DATETIME2 column's days per date, a SET column's Avro bytes per member mask) hold
at most ``MEMO_LIMIT`` entries each and start afresh when full: a long-running tap over a
column of many distinct dates or SET masks keeps its memory bounded (issue #58.7).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from python_ingest.sources.binlog import decoding as d
from python_ingest.sources.binlog.columns import to_avro
from python_ingest.sources.binlog.values import RawDate, RawDateTime, RawTimestamp, valid_date
from python_ingest.sources.tap import encoder as avro
from python_ingest.sources.tap.columns import ColumnSpec
from python_ingest.sources.tap.values import DAY_MICROS, days_from_civil

_UTF8 = ("utf8mb4", "utf8mb3", "utf8")
_STRUCTS = {(d.TINY, False): "<b", (d.TINY, True): "<B", (d.SHORT, False): "<h",
            (d.SHORT, True): "<H", (d.LONG, False): "<i", (d.LONG, True): "<I",
            (d.LONGLONG, False): "<q", (d.LONGLONG, True): "<Q"}
_SIZES = {"<b": 1, "<B": 1, "<h": 2, "<H": 2, "<i": 4, "<I": 4, "<q": 8, "<Q": 8}
_STRINGS = (d.VARCHAR, d.VAR_STRING, d.STRING)
_BLOBS = (d.BLOB, d.TINY_BLOB, d.MEDIUM_BLOB, d.LONG_BLOB)
KEY_KINDS = ("long", "ulong", "string", "decimal")
_COMPRESSED = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)  # bytes of 0..9 leftover decimal digits
MEMO_LIMIT = 4096  # entries of one column's memo (module doc)

class _Bytes:
    """A reader over bytes for decoding's helpers (``read(n)``)."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def read(self, n: int) -> bytes:
        self.at += n
        return self.data[self.at - n:self.at]


def _present(value: Any) -> bytes:
    """A temporal column's Avro value (days or micros, or None by the zero-date policy)."""
    return avro.NULL if value is None else avro.present_long(value)


def _datetime2(spec: ColumnSpec, fsp: int) -> Callable[[bytes], bytes]:
    def convert(raw: bytes) -> bytes:
        v = int.from_bytes(raw[:5], "big")
        year_month = (v >> 22) & 0x1FFFF
        value = RawDateTime(year_month // 13, year_month % 13, (v >> 17) & 31, (v >> 12) & 31,
                            (v >> 6) & 63, v & 63, d._fraction(_Bytes(raw[5:]), fsp))
        return _present(to_avro(spec, value))
    return convert


def _timestamp2(spec: ColumnSpec, fsp: int) -> Callable[[bytes], bytes]:
    def convert(raw: bytes) -> bytes:
        value = RawTimestamp(int.from_bytes(raw[:4], "big"), d._fraction(_Bytes(raw[4:]), fsp))
        return _present(to_avro(spec, value))
    return convert


def _date(spec: ColumnSpec) -> Callable[[bytes], bytes]:
    def convert(raw: bytes) -> bytes:
        v = int.from_bytes(raw, "little")
        return _present(to_avro(spec, RawDate(v >> 9, (v >> 5) & 15, v & 31)))
    return convert


def _time2(spec: ColumnSpec, fsp: int) -> Callable[[bytes], bytes]:
    def convert(raw: bytes) -> bytes:
        return avro.PRESENT + avro.text_bytes(to_avro(spec, d._time2(_Bytes(raw), fsp)))
    return convert


def decimal_text(unscaled: int, negative: bool, scale: int) -> str:
    """A DECIMAL key's text as the general path's ``format(Decimal, 'f')`` gives it (a
    negative zero keeps its sign, as mysql-replication's Decimal does)."""
    return format(Decimal((1 if negative else 0, tuple(map(int, str(unscaled))), -scale)), "f")


def _long_lines(i: int) -> list[str]:
    """``a<i>``: the int ``v`` as a present Avro long."""
    return ["z = (v << 1) ^ (v >> 63)", f"a{i} = PS[z] if z < 128 else PRESENT + varint(z)"]


def _unscaled_lines(i: int) -> list[str]:
    """``a<i>``: the int ``v`` as a present Avro decimal (its unscaled value's bytes)."""
    return ["b = v.to_bytes((v.bit_length() + 8) // 8, 'big', signed=True)",
            f"a{i} = PS[len(b) << 1] + b"]


def _decimal_lines(precision: int, scale: int) -> tuple[int, list[str]]:
    """MySQL's packed DECIMAL (groups of 9 digits in 4 bytes, the leftover digits in fewer,
    the sign in the first bit, a negative value's bits inverted) as its unscaled int ``v``
    (and ``neg``); returns the size in bytes and the lines."""
    integral = precision - scale
    pieces = [(_COMPRESSED[integral % 9], integral % 9), *[(4, 9)] * (integral // 9),
              *[(4, 9)] * (scale // 9), (_COMPRESSED[scale % 9], scale % 9)]
    pieces = [(size, digits) for size, digits in pieces if size]
    size = sum(s for s, _ in pieces)
    top = 1 << (8 * size - 1)
    lines = [f"s = int.from_bytes(buf[at:at + {size}], 'big')",
             f"at += {size}",
             f"if s & {top}:",
             f"    m = s ^ {top}",
             "    neg = False",
             "else:",
             f"    m = s ^ {top - 1}",
             "    neg = True"]
    shift = 8 * size
    for n, (piece, digits) in enumerate(pieces):
        shift -= 8 * piece
        value = f"((m >> {shift}) & {(1 << (8 * piece)) - 1})"
        lines.append(f"v = {value}" if n == 0 else f"v = v * {10 ** digits} + {value}")
    return size, lines


def _days(ymd: int) -> int | None:
    """Days since the epoch of a DATETIME2's 22 date bits (year * 13 + month, day), None
    when the date is not valid (zero, partial zero: ``columns.to_avro`` decides)."""
    year_month, day = ymd >> 5, ymd & 31
    y, m = year_month // 13, year_month % 13
    return days_from_civil(y, m, day) if valid_date(y, m, day) else None


def _datetime2_lines(i: int, frac: int, space: dict[str, Any]) -> list[str]:
    """A DATETIME2 (5 bytes: sign, year*13+month, day, hour, minute, second; then ``frac``
    bytes of fraction) as micros since the epoch: its day from a per-column memo of dates,
    an invalid date through ``conv<i>`` (the zero-date policy)."""
    space[f"D{i}"], space[f"H{i}"] = {}, [None, b""]
    space.update(days=_days, wide=avro.wide_varint, WIDE=avro.WIDE, DAY=DAY_MICROS)
    fraction = [f"f = int.from_bytes(buf[at + 5:at + {5 + frac}], 'big')"
                f"{' * ' + str((10_000, 100, 1)[frac - 1]) if frac < 3 else ''}"] if frac else \
        ["f = 0"]
    return ["v = int.from_bytes(buf[at:at + 5], 'big')",
            *fraction,
            "ymd = (v >> 17) & 0x3FFFFF",
            f"day = D{i}.get(ymd, -1)",
            "if day == -1:",
            f"    if len(D{i}) >= {MEMO_LIMIT}:",
            f"        D{i}.clear()",
            f"    day = D{i}[ymd] = days(ymd)",
            "if day is None:",
            f"    a{i} = conv{i}(buf[at:at + {5 + frac}])",
            "else:",
            "    m = day * DAY + (((v >> 12) & 31) * 3600 + ((v >> 6) & 63) * 60 + (v & 63)) "
            "* 1000000 + f",
            "    z = (m << 1) ^ (m >> 63)",
            f"    a{i} = PRESENT + (wide(z, H{i}) if z >= WIDE else varint(z))",
            f"at += {5 + frac}"]


def column_lines(gen: Any, i: int, spec: ColumnSpec, column: Any, key: int | None,
                 space: dict[str, Any]) -> list[str]:
    """The lines that read column ``i``'s value at ``at`` into its Avro bytes ``a<i>``
    (a key column also sets ``k<n>``, its key text)."""
    t, kind = column.type, spec.kind
    lines: list[str]
    keytext: str | None = None
    if (t in (*_STRUCTS, d.INT24, d.YEAR) or (t, column.unsigned) in _STRUCTS) and \
            kind in ("long", "ulong"):
        if t == d.INT24:
            lines = [f"v = int.from_bytes(buf[at:at + 3], 'little', "
                     f"signed={not column.unsigned})", "at += 3"]
        elif t == d.YEAR:
            lines = ["v = buf[at]", "at += 1", "if v:", "    v += 1900"]
        else:
            fmt = _STRUCTS[(t, bool(column.unsigned))]
            space[f"U{i}"] = struct.Struct(fmt).unpack_from
            lines = [f"v = U{i}(buf, at)[0]", f"at += {_SIZES[fmt]}"]
        lines += _long_lines(i) if kind == "long" else _unscaled_lines(i)
        keytext = "str(v)"
        gen.key_bytes[i] = "b'%d' % v"
    elif t in (d.FLOAT, d.DOUBLE) and kind in ("float", "double"):
        size = 4 if t == d.FLOAT else 8
        lines = [f"a{i} = PRESENT + buf[at:at + {size}]", f"at += {size}"]
        gen.floats.append((i, "<f" if size == 4 else "<d"))
    elif t == d.NEWDECIMAL and kind == "decimal":
        _, lines = _decimal_lines(column.precision, column.decimals)
        lines += ["if neg:", "    v = -v", *_unscaled_lines(i)]
        keytext = f"decimal_text(-v if neg else v, neg, {column.decimals})"
    elif (t in _STRINGS or t in _BLOBS) and kind in ("string", "bytes", "fixed"):
        width = (2 if column.max_length > 255 else 1) if t in _STRINGS else column.length_size
        lines = {1: ["n = buf[at]"], 2: ["n = buf[at] | buf[at + 1] << 8"]}.get(width, [
            f"n = int.from_bytes(buf[at:at + {width}], 'little')"])
        lines += [f"at += {width}", "raw = buf[at:at + n]", "at += n"]
        if kind == "fixed":
            lines += [f"raw = raw.ljust({spec.width}, b'\\0')", "n = len(raw)"]
        elif kind == "string" and spec.charset in _UTF8:
            lines += ["if not raw.isascii():", "    raw.decode()  # or the general path"]
            keytext = "raw.decode()"
            gen.key_bytes[i] = "raw if raw.strip(EMPTY_KEY) else row_key_text(raw.decode())" \
                ".encode()"
        elif kind == "string" and spec.charset == "ascii":
            lines += ["if not raw.isascii():", "    return None"]
            keytext = "raw.decode()"
        elif kind == "string":
            space[f"C{i}"] = spec.charset
            lines += [f"t = text(C{i}, raw)", "raw = t.encode()", "n = len(raw)"]
            keytext = "t"
        lines.append(f"a{i} = (PS[n << 1] if n < 64 else PRESENT + varint(n << 1)) + raw")
    elif t in (d.DATETIME2, d.TIMESTAMP2, d.DATE, d.NEWDATE, d.TIME2) and kind in (
            "datetime", "timestamp", "date", "time"):
        fsp = getattr(column, "fsp", 0) or 0
        frac = (fsp + 1) // 2
        size, convert = {
            d.DATETIME2: (5 + frac, _datetime2(spec, fsp) if kind == "datetime" else None),
            d.TIMESTAMP2: (4 + frac, _timestamp2(spec, fsp) if kind == "timestamp" else None),
            d.DATE: (3, _date(spec) if kind == "date" else None),
            d.NEWDATE: (3, _date(spec) if kind == "date" else None),
            d.TIME2: (3 + frac, _time2(spec, fsp) if kind == "time" else None)}[t]
        if convert is None:
            raise Unsupported
        space[f"conv{i}"], space[f"last{i}"] = convert, [None, b""]
        if t == d.DATETIME2:
            lines = _datetime2_lines(i, frac, space)
        else:
            lines = [f"raw = buf[at:at + {size}]", f"at += {size}",
                     f"if raw != last{i}[0]:",
                     f"    last{i}[1] = conv{i}(raw)",
                     f"    last{i}[0] = raw",
                     f"a{i} = last{i}[1]"]
    elif t == d.BIT and kind in ("bool", "bit", "bit64"):
        lines = [f"v = int.from_bytes(buf[at:at + {column.bytes}], 'big')",
                 f"at += {column.bytes}",
                 {"bool": f"a{i} = TRUE if v else FALSE",
                  "bit": f"a{i} = present_long(v)",
                  "bit64": f"b = unscaled(v)\na{i} = PS[len(b) << 1] + b"}[kind]]
        lines = "\n".join(lines).split("\n")
    elif t == d.ENUM and kind == "enum":
        encoded = [avro.PRESENT + avro.text_bytes(m) for m in ("", *spec.members)]
        space[f"E{i}"], space[f"N{i}"] = encoded, len(encoded)
        lines = [f"v = int.from_bytes(buf[at:at + {column.size}], 'little')",
                 f"at += {column.size}",
                 f"a{i} = E{i}[v] if v < N{i} else E{i}[0]"]
    elif t == d.SET and kind == "set":
        def members(mask: int, names: tuple[str, ...] = spec.members) -> bytes:
            return avro.PRESENT + avro.text_bytes(
                ",".join(m for n, m in enumerate(names) if mask >> n & 1))
        space[f"S{i}"], space[f"M{i}"] = {}, members
        lines = [f"v = int.from_bytes(buf[at:at + {column.size}], 'little')",
                 f"at += {column.size}",
                 f"a{i} = S{i}.get(v)",
                 f"if a{i} is None:",
                 f"    if len(S{i}) >= {MEMO_LIMIT}:",
                 f"        S{i}.clear()",
                 f"    a{i} = S{i}[v] = M{i}(v)"]
    else:
        raise Unsupported(f"{spec.name} {t} {kind}")
    if key is not None:
        if keytext is None:
            raise Unsupported
        if gen.single_key and i in gen.key_bytes:
            lines.append(f"kb = {gen.key_bytes[i]}")
        else:
            lines.append(f"k{key} = {keytext}")
    return lines


class Unsupported(Exception):
    """A column the fast path does not read: the table takes the general path."""
