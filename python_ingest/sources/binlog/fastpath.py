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
types by fastpath_columns.py; ``FastRows.source`` shows it), as postgres/fastpath.py does for
pgoutput.

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
from typing import Any

from python_ingest.changelog.keys import EMPTY_KEY_BYTES, row_key_text
from python_ingest.changelog.schema import KEY_SEPARATOR
from python_ingest.sources.binlog.events import TappedTable
from python_ingest.sources.binlog.fastpath_columns import (
    KEY_KINDS,
    Unsupported,
    column_lines,
    decimal_text,
)
from python_ingest.sources.binlog.position import pack_ref
from python_ingest.sources.tap import encoder as avro
from python_ingest.sources.tap.changes import DELETE, INSERT, UPDATE, Envelope
from python_ingest.sources.tap.errors import MAX_MESSAGE_BYTES
from python_ingest.sources.tap.registry import COLUMNS, PRIMARY, UNIQUE

PARTIAL_UPDATE_ROWS_EVENT = 39
# SLUICE_BINLOG_FASTPATH=0: every event on the general path (to compare, or to rule it out)
ENABLED = os.environ.get("SLUICE_BINLOG_FASTPATH", "1") != "0"


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
            body = column_lines(self, i, spec, column, key_at.get(i), space)
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
                any(table.specs[[s.name for s in table.specs].index(c)].kind not in KEY_KINDS
                    for c in shape.key.columns):
            return None
        try:
            return FastRows(table, columns)
        except Unsupported:
            return None

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
