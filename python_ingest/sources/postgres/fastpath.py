"""The tap's fast path: a pgoutput row change straight to its Kafka key and Avro message.

The general path (pgoutput.decode → events.py → errors.publish) builds a message object, a
list of Python values, a dict per record and hands it to fastavro; per change that costs
several times what decoding alone does (docs/postgres-source.md, "Measured"). Most changes
need none of its generality: an insert, an update that carries no old row, or a delete, of a
table keyed by its own columns, every value present and convertible. For those, FastTable
reads the tuple's bytes once and writes the Avro body as it goes (Avro's binary encoding is
simple: zigzag varints, length-prefixed bytes, little-endian floats; every column is the
union ``["null", T]``), copying text values byte for byte (pgoutput's text is the UTF-8 the
record holds). Its ``encode`` is compiled per table shape (Python source generated for the
table's columns, one straight block per column, no per-column dispatch; ``FastTable.source``
shows it): the same idea as fastavro's and attrs' generated code.

Anything else returns None and the change takes the general path, which decides and reports
it: a TOASTed value left unchanged (a partial update), a key change or a full old row
(REPLICA IDENTITY FULL), a value that does not convert (a numeric NaN), a key column without
a value, a message near Kafka's limit. Both paths give the same bytes
(tests/sources/postgres/test_fastpath.py compares them type by type).

When tuplecodec.c is built (native.py, ``make setup``), a table whose columns are all of the
kinds it takes and whose key is one column's text encodes in C (``encode`` is then
``partial(_tuplecodec.encode, plan)``); the generated Python encoder (``python_encode``) stays
the reference, and every row the C encoder cannot encode exactly goes to it
(tests/sources/postgres/test_native.py).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import partial
from typing import Any

from python_ingest.changelog.keys import EMPTY_KEY_BYTES
from python_ingest.changelog.schema import KEY_SEPARATOR
from python_ingest.sources.postgres import native
from python_ingest.sources.postgres.columns import to_money
from python_ingest.sources.postgres.events import PgTable
from python_ingest.sources.tap.columns import key_text
from python_ingest.sources.tap.encoder import NULL, PRESENT, PRESENT_SMALL, long_bytes, varint
from python_ingest.sources.tap.errors import MAX_MESSAGE_BYTES
from python_ingest.sources.tap.producer import decimal_bytes
from python_ingest.sources.tap.registry import COLUMNS, PRIMARY, UNIQUE

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_FLOAT = struct.Struct("<f")
_DOUBLE = struct.Struct("<d")

# what a column's value is written as (its kind, from columns.py)
TEXT, LONG, DECIMAL, FLOAT, DOUBLE, BOOL, CONVERTED_LONG, BYTES, MONEY = range(9)
_CODES = {"string": TEXT, "json": TEXT, "uuid": TEXT, "bigdecimal": TEXT, "long": LONG,
          "decimal": DECIMAL, "float": FLOAT, "double": DOUBLE, "bool": BOOL,
          "date": CONVERTED_LONG, "datetime": CONVERTED_LONG, "timestamp": CONVERTED_LONG,
          "bytes": BYTES}
_RAW_KEYS = (TEXT, LONG)  # kinds whose key text is the server's text as it is
_NATIVE = (TEXT, LONG, DECIMAL, FLOAT, DOUBLE, BOOL, CONVERTED_LONG)  # tuplecodec.c's kinds
_TWO_PIECES = (TEXT, DECIMAL, BYTES, MONEY)  # a prefix, then bytes (see _column)



class RefKeys:
    """The Avro bytes of a transaction's ref keys, ``base + index`` (position.ref_key).

    ``base`` (the commit LSN << 18) has its low 18 bits clear, so below 2^18 changes the
    zigzag value's low 21 bits (its first three varint bytes) come from the index and two bits
    of the LSN, and the bytes after them are the transaction's: computed once at its Begin."""

    def __init__(self) -> None:
        self.begin(0)

    def begin(self, base: int) -> None:
        self.base = base
        zigzag = base << 1
        self.mid = zigzag & (3 << 19)
        self.high = varint(zigzag >> 21) if zigzag >> 21 else b""

    def encode(self, index: int) -> bytes:
        if index >= 1 << 18 or not self.high:
            return varint((self.base + index) << 1)
        v = (index << 1) | self.mid
        return bytes(((v & 127) | 128, ((v >> 7) & 127) | 128, (v >> 14) | 128)) + self.high


class FastTable:
    """The fast path of one table (see the module doc); ``None`` from ``of`` when the table's
    key makes every change take the general path."""

    def __init__(self, table: PgTable, header: bytes) -> None:
        self.table = table
        self.topic = table.topic
        specs = table.specs
        codes = [MONEY if c is to_money else _CODES[s.kind]
                 for s, c in zip(specs, table.converters, strict=True)]
        names = [s.name for s in specs]
        key_at = {names.index(c): n for n, c in enumerate(table.shape.key.columns)}
        self.raw_key = len(key_at) == 1 and codes[next(iter(key_at))] in _RAW_KEYS
        lines = ["def encode(buf, at, ref, tail):",
                 "    size = len(buf)",
                 "    try:",
                 f"        if unpack16(buf, at)[0] != {len(specs)}:",
                 "            return None",
                 "        at += 2"]
        pieces = ["HEADER"]  # the message's parts, in order: locals the columns set
        for i, code in enumerate(codes):
            lines += _column(i, code, specs[i].scale, key_at.get(i), self.raw_key)
            pieces += [f"a{i}", f"b{i}"] if code in _TWO_PIECES else [f"a{i}"]
        # ArithmeticError: decimal.InvalidOperation (a numeric or money text Decimal cannot
        # read); malformed bytes (a length past the message, a negative one) are ValueError
        lines += ["    except (ValueError, TypeError, ArithmeticError, IndexError, struct_error):",
                  "        return None  # the general path converts it again and reports it",
                  f'    message = b"".join(({", ".join(pieces)}, varint(ref << 1), tail))']
        if self.raw_key:
            lines.append("    key = key0")
        else:
            texts = ", ".join(f"key{n}" for n in range(len(key_at)))
            lines += [f"    texts = ({texts},)",
                      "    if len(texts) > 1 and any(SEPARATOR in t for t in texts):",
                      "        return None  # the general path raises what TableShape.key_of says",
                      '    key = SEPARATOR.join(texts).encode("utf-8")']
        if len(key_at) == 1 and not (self.raw_key and codes[next(iter(key_at))] == LONG):
            # '' or only '∅': the general path's row_key_text (changelog/keys.py); an integer's
            # text (int() took it) is neither
            lines += ["    if not key.strip(EMPTY_KEY):",
                      "        return None"]
        lines += ["    if len(key) + len(message) > MAX_BYTES:",
                  "        return None",
                  "    return key, message"]
        self.source = "\n".join(lines) + "\n"
        space: dict[str, Any] = {
            "HEADER": header, "NULL": NULL, "PRESENT": PRESENT, "SMALL": PRESENT_SMALL,
            "unpack16": _I16.unpack_from, "unpack": _I32.unpack_from, "varint": varint,
            "long_bytes": long_bytes, "decimal_bytes": decimal_bytes, "key_text": key_text,
            "pack_d": _DOUBLE.pack, "pack_f": _FLOAT.pack, "struct_error": struct.error,
            "SEPARATOR": KEY_SEPARATOR, "MAX_BYTES": MAX_MESSAGE_BYTES,
            "LONG_MIN": -(1 << 63), "LONG_MAX": (1 << 63) - 1, "ZIGZAG_END": 1 << 64,
            "EMPTY_KEY": EMPTY_KEY_BYTES}
        for i, spec in enumerate(specs):
            space[f"conv{i}"] = table.converters[i]
            space[f"spec{i}"] = spec
            # a date's or timestamp's last text and its encoding: a transaction's rows often
            # share one (now() is the transaction's start), and parsing it is the cost
            space[f"last{i}"] = [None, b""]
        exec(compile(self.source, f"<fastpath {table.shape.qualified}>", "exec"), space)
        # encode(buf, at, ref, tail): (key, message) of the TupleData at buf[at:] with the ref
        # key ref (an int, never negative: its Avro long is varint(ref << 1)) and the envelope
        # tail; None when the change must take the general path
        self.python_encode: Callable[[bytes, int, int, bytes], tuple[bytes, bytes] | None] = \
            space["encode"]
        self.encode = self.python_encode
        plan = self._native_plan(codes, header, space) if self.raw_key else None
        module = native.codec() if plan is not None else None
        if module is not None and plan is not None:  # the same bytes, in C (native.py)
            self.encode = partial(module.encode, plan)

    def _native_plan(self, codes: list[int], header: bytes, space: dict[str, Any]
                     ) -> tuple[Any, ...] | None:
        """tuplecodec.c's description of the table (see there), None when a column is of a
        kind it leaves to Python (bytea, money, a numeric scale past 18 digits)."""
        specs = self.table.specs
        if any(c not in _NATIVE or c == DECIMAL and not 0 <= (s.scale or 0) <= 18
               for c, s in zip(codes, specs, strict=True)):
            return None
        key_column = next(i for i, s in enumerate(specs)
                          if s.name == self.table.shape.key.columns[0])
        return (header, bytes(codes),
                bytes((s.scale or 0) if c == DECIMAL else 0 for c, s in zip(codes, specs,
                                                                              strict=True)),
                key_column, tuple(space[f"last{i}"] for i in range(len(specs))),
                tuple(self.table.converters), self.python_encode, MAX_MESSAGE_BYTES,
                EMPTY_KEY_BYTES)

    @staticmethod
    def of(table: PgTable) -> FastTable | None:
        key = table.shape.key
        if key.kind not in (PRIMARY, UNIQUE, COLUMNS) or key.synthetic or \
                len(table.shape.payload) != len(table.specs) or \
                any(s.kind not in _CODES for s in table.specs):
            return None
        return FastTable(table, table.encoder.header)


def _column(i: int, code: int, scale: int, key: int | None, raw_key: bool) -> list[str]:
    """The generated lines that read column ``i`` of a TupleData into its Avro bytes: local
    ``a<i>`` (and ``b<i>`` for the kinds in _TWO_PIECES: a prefix, then the bytes as they
    are); a key column also sets ``key<n>``."""
    value = {
        TEXT: ["if not raw.isascii():",
               "    raw.decode()  # valid UTF-8, or the general path says so",
               "a{i} = SMALL[n << 1] if n < 64 else PRESENT + varint(n << 1)",
               "b{i} = raw"],
        LONG: ["v = int(raw)",
               "v = (v << 1) ^ (v >> 63)",
               "if not 0 <= v < ZIGZAG_END:  # past a 64-bit long: the general path says so",
               "    raise OverflowError",
               "if v < 128:",
               "    a{i} = SMALL[v]",
               "elif v < 16384:  # varint's two and three bytes, without its call",
               "    a{i} = bytes((2, (v & 127) | 128, v >> 7))",
               "elif v < 2097152:",
               "    a{i} = bytes((2, (v & 127) | 128, ((v >> 7) & 127) | 128, v >> 14))",
               "else:",
               "    a{i} = PRESENT + varint(v)"],
        DECIMAL: _decimal(scale),
        CONVERTED_LONG: ["if raw != last{i}[0]:",
                         "    v = conv{i}(raw.decode())",
                         "    if not LONG_MIN <= v <= LONG_MAX:  # e.g. a timestamp past "
                         "294247-01-10",
                         "        raise OverflowError  # (an Avro long cannot hold it)",
                         "    v = PRESENT + long_bytes(v)",
                         "    last{i}[1] = v",
                         "    last{i}[0] = raw",
                         "a{i} = last{i}[1]"],
        DOUBLE: ["a{i} = PRESENT + pack_d(float(raw))"],
        FLOAT: ["a{i} = PRESENT + pack_f(float(raw))"],
        BOOL: ["a{i} = SMALL[1] if raw == b't' else SMALL[0]"],
        BYTES: ["b{i} = conv{i}(raw.decode())",
                "a{i} = SMALL[len(b{i}) << 1] if len(b{i}) < 64 else "
                "PRESENT + varint(len(b{i}) << 1)"],
        MONEY: ["b{i} = decimal_bytes(conv{i}(raw.decode()), {scale})",
                "a{i} = SMALL[len(b{i}) << 1]"],
    }[code]
    if key is not None:
        value.append(f"key{key} = raw" if raw_key else
                     "key{key} = key_text(spec{i}, conv{i}(raw.decode()))")
    null = (["    return None  # a key column without a value"] if key is not None else
            ["    a{i} = NULL", *(["    b{i} = b''"] if code in _TWO_PIECES else []),
             "    at += 1"])
    lines = ["kind = buf[at]",
             "if kind == 116:  # 't': the value's text",
             "    n = unpack(buf, at + 1)[0]",
             "    at += 5",
             "    if n < 0 or at + n > size:  # malformed: the general path raises",
             "        raise ValueError",
             "    raw = buf[at:at + n]",
             "    at += n",
             *("    " + line for line in value),
             "elif kind == 110:  # 'n': NULL",
             *null,
             "else:  # 'u': a TOASTed value left unchanged",
             "    return None"]
    return [f"        # column {i}",
            *("        " + line.format(i=i, key=key, scale=scale) for line in lines)]


def _decimal(scale: int) -> list[str]:
    """numeric(p,s): its text has exactly s digits after the point, so the unscaled integer
    is the text without it (anything else, as the general path does: Decimal)."""
    plain = [f"if len(raw) > {scale} and raw[-{scale + 1}] == 46:  # '.', {scale} digits on",
             '    v = int(raw.replace(b".", b""))'] if scale else \
        ["if raw.isdigit() or raw[1:].isdigit():", "    v = int(raw)"]
    return [*(line.replace("{", "{{").replace("}", "}}") for line in plain),
            "    b{i} = v.to_bytes((v.bit_length() + 8) // 8, 'big', signed=True)",
            "else:",
            "    b{i} = decimal_bytes(conv{i}(raw.decode()), {scale})",
            "a{i} = SMALL[len(b{i}) << 1]"]
