"""The binlog tap's fast path: a rows event's bytes straight to Kafka keys and Avro messages.

The general path (mysql-replication's ``event.rows`` with ``decoding.read_value``, then
events.py's ``changes``, then errors.publish with fastavro) builds, per row change, a dict
of raw values, a dict of Avro values, a record dict and a Change, and walks every column
through a chain of type tests; the profile of ``make bench-tap`` put 95 % of the tap's time
there (docs/binlog-tap.md, "Speed"). Most rows events need none of its generality: every
column present (``binlog_row_image=FULL``), a table keyed by its own columns, every value
convertible. For those, ``FastRows`` reads the row images from the event's bytes once and
writes each column's Avro bytes as it goes (tap/encoder.py), one straight block of code per
column, compiled per table map layout (Python source generated from the columns' binlog
types; ``FastRows.source`` shows it), as postgres/fastpath.py does for pgoutput.

Values are read as ``decoding.read_value`` reads them; temporal values (DATETIME2,
TIMESTAMP2, DATE, TIME2) go through ``columns.to_avro`` itself (the zero-date policy), cached
per distinct value (a transaction's rows often share one: ``NOW()``). Anything else returns
None and the whole event takes the general path, which decides and reports it: text that is
not valid UTF-8, a key column without a value, a key holding the composite key separator, a
message near Kafka's limit, a column type the fast path does not read (MySQL's binary JSON,
GEOMETRY, MariaDB's UUID/INET, DECIMAL beyond 38 digits, pre-5.6 temporal types), a minimal
row image, a table keyed by a full-row identity or a changelog. Nothing is sent before the
whole event is encoded, so falling back never publishes twice. Both paths give the same
bytes (tests/sources/binlog/test_fastpath.py compares them type by type);
``SLUICE_BINLOG_FASTPATH=0`` puts every event on the general path.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from python_ingest.changelog.keys import EMPTY_KEY_BYTES, row_key_text
from python_ingest.changelog.schema import KEY_SEPARATOR
from python_ingest.sources.binlog import decoding as d
from python_ingest.sources.binlog.columns import ColumnSpec, to_avro
from python_ingest.sources.binlog.events import TappedTable
from python_ingest.sources.binlog.position import pack_ref
from python_ingest.sources.binlog.values import (
    DAY_MICROS,
    RawDate,
    RawDateTime,
    RawTimestamp,
    days_from_civil,
    valid_date,
)
from python_ingest.sources.tap import encoder as avro
from python_ingest.sources.tap.changes import DELETE, INSERT, UPDATE, Envelope
from python_ingest.sources.tap.errors import MAX_MESSAGE_BYTES
from python_ingest.sources.tap.registry import COLUMNS, PRIMARY, UNIQUE

_UTF8 = ("utf8mb4", "utf8mb3", "utf8")
_STRUCTS = {(d.TINY, False): "<b", (d.TINY, True): "<B", (d.SHORT, False): "<h",
            (d.SHORT, True): "<H", (d.LONG, False): "<i", (d.LONG, True): "<I",
            (d.LONGLONG, False): "<q", (d.LONGLONG, True): "<Q"}
_SIZES = {"<b": 1, "<B": 1, "<h": 2, "<H": 2, "<i": 4, "<I": 4, "<q": 8, "<Q": 8}
_STRINGS = (d.VARCHAR, d.VAR_STRING, d.STRING)
_BLOBS = (d.BLOB, d.TINY_BLOB, d.MEDIUM_BLOB, d.LONG_BLOB)
_KEY_KINDS = ("long", "ulong", "string", "decimal")
_COMPRESSED = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)  # bytes of 0..9 leftover decimal digits
PARTIAL_UPDATE_ROWS_EVENT = 39
# SLUICE_BINLOG_FASTPATH=0: every event on the general path (to compare, or to rule it out)
ENABLED = os.environ.get("SLUICE_BINLOG_FASTPATH", "1") != "0"


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
            f"    day = D{i}[ymd] = days(ymd)",
            "if day is None:",
            f"    a{i} = conv{i}(buf[at:at + {5 + frac}])",
            "else:",
            "    m = day * DAY + (((v >> 12) & 31) * 3600 + ((v >> 6) & 63) * 60 + (v & 63)) "
            "* 1000000 + f",
            "    z = (m << 1) ^ (m >> 63)",
            f"    a{i} = PRESENT + (wide(z, H{i}) if z >= WIDE else varint(z))",
            f"at += {5 + frac}"]


class FastRows:
    """The fast path of one table under one table map layout (module doc); ``of`` returns
    None when the table's key or a column's type makes every event take the general path."""

    def __init__(self, table: TappedTable, columns: list[Any]) -> None:
        self.table = table
        specs = table.specs
        names = [s.name for s in specs]
        key_at = {names.index(c): n for n, c in enumerate(table.shape.key.columns)}
        self.count = len(specs)
        self.refs: list[Any] = [None, b""]  # the ref keys' high bytes (encoder.wide_varint)
        self.key_bytes: dict[int, str] = {}  # column -> its single key's bytes (an expression)
        self.single_key = len(table.shape.key.columns) == 1
        self.full_bitmap = bytes([0xFF] * (self.count // 8) +
                                 ([(1 << (self.count % 8)) - 1] if self.count % 8 else []))
        nulls = (self.count + 7) // 8
        space: dict[str, Any] = {
            "NULL": avro.NULL, "PRESENT": avro.PRESENT, "PS": avro.PRESENT_SMALL,
            "TRUE": avro.TRUE, "FALSE": avro.FALSE, "varint": avro.varint,
            "present_long": avro.present_long, "unscaled": avro.unscaled_bytes,
            "text": table.text, "decimal_text": decimal_text}
        lines = ["def image(buf, at):",
                 *(f"    n{b} = buf[at + {b}]" for b in range(nulls)),
                 f"    at += {nulls}"]
        self.floats: list[tuple[int, str]] = []  # (column, struct format): ±0 compare equal
        for i, (spec, column) in enumerate(zip(specs, columns, strict=True)):
            body = self._column(i, spec, column, key_at.get(i), space)
            null = ["return None  # a key column without a value"] if i in key_at else \
                [f"a{i} = NULL"]
            lines += [f"    if n{i // 8} & {1 << (i % 8)}:",
                      *("        " + x for x in null),
                      "    else:",
                      *("        " + x for x in body)]
        keys = [f"k{n}" for n in range(len(key_at))]
        key_line = "key.encode()"
        if len(keys) == 1 and next(iter(key_at)) in self.key_bytes:
            key_line = "kb"  # the key's bytes, as its column's block made them
        elif len(keys) == 1:
            lines.append("    key = row_key_text(k0)")
        else:
            lines += [f"    if any(SEPARATOR in k for k in ({', '.join(keys)},)):",
                      "        return None  # the general path stops the table (TableShape.key_of)",
                      f"    key = row_key_text(SEPARATOR.join(({', '.join(keys)},)))"]
        parts = f"({''.join(f'a{i}, ' for i in range(self.count))})"
        # the parts themselves when floats must be compared by value (FastRows._same), else
        # the body: equal bodies are equal parts (each part's length is in its bytes)
        lines.append(f"    return at, {parts if self.floats else 'join(' + parts + ')'}, "
                     f"{key_line}")
        space.update(row_key_text=row_key_text, SEPARATOR=KEY_SEPARATOR, join=b"".join,
                     EMPTY_KEY=EMPTY_KEY_BYTES)
        self.source = "\n".join(lines) + "\n"
        exec(compile(self.source, f"<binlog fastpath {table.shape.qualified}>", "exec"), space)
        # image(buf, at): (where the next image starts, its body (or parts), its key's bytes),
        # None when the event must take the general path
        self.image: Callable[[bytes, int], tuple[int, Any, bytes] | None] = space["image"]

    @staticmethod
    def of(table: TappedTable, columns: list[Any]) -> FastRows | None:
        shape = table.shape
        if shape.key.kind not in (PRIMARY, UNIQUE, COLUMNS) or shape.key.synthetic or \
                len(shape.payload) != len(table.specs) or len(columns) != len(table.specs) or \
                any(table.specs[[s.name for s in table.specs].index(c)].kind not in _KEY_KINDS
                    for c in shape.key.columns):
            return None
        try:
            return FastRows(table, columns)
        except _Unsupported:
            return None

    def _column(self, i: int, spec: ColumnSpec, column: Any, key: int | None,
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
            self.key_bytes[i] = "b'%d' % v"
        elif t in (d.FLOAT, d.DOUBLE) and kind in ("float", "double"):
            size = 4 if t == d.FLOAT else 8
            lines = [f"a{i} = PRESENT + buf[at:at + {size}]", f"at += {size}"]
            self.floats.append((i, "<f" if size == 4 else "<d"))
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
                self.key_bytes[i] = "raw if raw.strip(EMPTY_KEY) else row_key_text(raw.decode())" \
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
                raise _Unsupported
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
                     f"    a{i} = S{i}[v] = M{i}(v)"]
        else:
            raise _Unsupported(f"{spec.name} {t} {kind}")
        if key is not None:
            if keytext is None:
                raise _Unsupported
            if self.single_key and i in self.key_bytes:
                lines.append(f"kb = {self.key_bytes[i]}")
            else:
                lines.append(f"k{key} = {keytext}")
        return lines

    def messages(self, buf: bytes, at: int, end: int, kind: str, file_index: int,
                 event_end: int, tails: tuple[bytes, bytes]) -> tuple[int, list[Any]] | None:
        """The row changes counted and the (key, message) pairs of a rows event's images at
        ``buf[at:end]`` (``tails``: the envelope after the ref key, live and deleted), or
        None when the event must take the general path."""
        image, images = self.image, []
        try:
            while at < end:
                found = image(buf, at)
                if found is None:
                    return None
                at = found[0]
                images.append(found)
        except Exception:  # the general path reads it again and reports what it finds
            return None
        if at != end:
            return None
        header = self.table.encoder.header
        join, memo = b"".join, self.refs

        def long_bytes(ref: int) -> bytes:  # ref keys: large and close together
            z = ref << 1
            return avro.wide_varint(z, memo) if z >= avro.WIDE else avro.varint(z)

        live, deleted = tails
        parts = bool(self.floats)  # images hold their parts, not their body
        out: list[tuple[bytes, bytes]] = []
        if kind in (INSERT, DELETE):
            base = pack_ref(file_index, event_end - len(images))
            tail = deleted if kind == DELETE else live
            for n, (_, body, key) in enumerate(images):
                if parts:
                    body = join(body)
                out.append((key, join((header, body, long_bytes(base + n), tail))))
            count = len(images)
        elif kind == UPDATE:
            if len(images) % 2:
                return None
            count = len(images) // 2
            base = pack_ref(file_index, event_end - len(images))
            for n in range(0, len(images), 2):
                _, before, old = images[n]
                _, after, new = images[n + 1]
                if before == after or (self.floats and self._same(before, after)):
                    continue  # an update that changes nothing publishes nothing
                if parts:
                    before, after = join(before), join(after)
                if old != new:
                    out.append((old, join((header, before, long_bytes(base + n), deleted))))
                out.append((new, join((header, after, long_bytes(base + n + 1), live))))
        else:
            return None
        for key, message in out:
            if len(key) + len(message) > MAX_MESSAGE_BYTES:
                return None
        return count, out

    def _same(self, before: tuple[bytes, ...], after: tuple[bytes, ...]) -> bool:
        """Whether two images' values are equal where only floats differ in their bytes
        (0.0 and -0.0 are equal values, as the general path compares them)."""
        floats = dict(self.floats)
        for i, (x, y) in enumerate(zip(before, after, strict=True)):
            if x != y and (i not in floats or len(x) == 1 or len(y) == 1 or
                           struct.unpack(floats[i], x[1:]) != struct.unpack(floats[i], y[1:])):
                return False
        return True


class _Unsupported(Exception):
    """A column the fast path does not read: the table takes the general path."""


def _layout(columns: list[Any]) -> tuple[Any, ...]:
    return tuple((c.type, c.unsigned, getattr(c, "max_length", None),
                  getattr(c, "length_size", None), getattr(c, "size", None),
                  getattr(c, "bytes", None), getattr(c, "precision", None),
                  getattr(c, "decimals", None), getattr(c, "fsp", None)) for c in columns)


def fast_rows(table: TappedTable, event: Any) -> FastRows | None:
    """The table's fast path for this event's table map (built once per layout)."""
    table_obj = event.table_map[event.table_id]
    cached = table.__dict__.get("_fast_last")
    if cached is not None and cached[0] is table_obj:
        return cached[1]
    layouts: dict[tuple[Any, ...], FastRows | None] = table.__dict__.setdefault(
        "_fast_layouts", {})
    columns = list(event.columns)
    layout = _layout(columns)
    if layout not in layouts:
        layouts[layout] = FastRows.of(table, columns)
    table.__dict__["_fast_last"] = (table_obj, layouts[layout])
    return layouts[layout]


def rows_bytes(event: Any, fast: FastRows, kind: str) -> tuple[bytes, int, int] | None:
    """The event's buffer and where its row images start and end, when every column is
    present and nothing of it was read yet; else None."""
    packet = event.packet
    if getattr(packet, "_BinLogPacketWrapper__data_buffer", b"") or \
            not getattr(event, "complete", True) or \
            event.event_type == PARTIAL_UPDATE_ROWS_EVENT or \
            event.number_of_columns != fast.count or \
            event.columns_present_bitmap != fast.full_bitmap or \
            (kind == UPDATE and event.columns_present_bitmap2 != fast.full_bitmap):
        return None
    raw = packet.packet
    at = raw._position
    return raw._data, at, at + event.event_size - packet.read_bytes


_tails: dict[Envelope, tuple[bytes, bytes]] = {}


def tails(env: Envelope) -> tuple[bytes, bytes]:
    """The envelope after the ref key of a live and of a deleted row (cached: a transaction's
    events share one)."""
    found = _tails.get(env)
    if found is None:
        if len(_tails) > 64:
            _tails.clear()
        found = _tails[env] = (
            avro.envelope_tail(env.source, env.event_ts_ms, env.data_center, False),
            avro.envelope_tail(env.source, env.event_ts_ms, env.data_center, True))
    return found


def publish(tap: Any, table: TappedTable, event: Any, kind: str, file_index: int,
            event_end: int, env: Envelope) -> bool:
    """Publish a rows event by the table's fast path; False (nothing sent, nothing read from
    the event) when it must take the general path."""
    if not ENABLED:
        return False
    fast = fast_rows(table, event)
    if fast is None:
        return False
    found = rows_bytes(event, fast, kind)
    if found is None:
        return False
    result = fast.messages(*found, kind, file_index, event_end, tails(env))
    if result is None:
        return False
    count, out = result
    tap.stats.row_changes += count
    send, topic = tap.producer.send, table.topic
    for key, message in out:
        send(topic, key, message)
    tap.stats.messages += len(out)
    return True
