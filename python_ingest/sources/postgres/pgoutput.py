"""The pgoutput protocol (PostgreSQL's built-in logical decoding plugin), decoded.

Every message of the logical replication stream is one of the frozen dataclasses below
(protocol version 1: Begin, Commit, Origin, Relation, Type, Insert, Update, Delete, Truncate,
Message; version 2 adds the stream messages of large in-progress transactions, whose changes
carry their transaction's xid: ``decode_streamed``). Column values arrive in their text form,
the type's output function's under the replication connection's settings (server.py fixes
DateStyle, IntervalStyle, TimeZone, extra_float_digits and bytea_output, so the text has one
known form), as ``None`` for NULL, or as ``UNCHANGED`` for a TOASTed value that an update did
not change and the server did not send (docs/postgres-source.md, "Replica identity").

Reference: PostgreSQL's "Logical Replication Message Formats" (protocol.sgml).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

PG_EPOCH_MS = 946_684_800_000  # 2000-01-01 in Unix milliseconds: the protocol's time origin


class _Unchanged:
    """An unchanged TOASTed value the server did not send ('u')."""

    _instance: _Unchanged | None = None

    def __new__(cls) -> _Unchanged:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED: Any = _Unchanged()

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_BEGIN = struct.Struct(">QqI")
_COMMIT = struct.Struct(">bQQq")
_COLUMN = struct.Struct(">Ii")


@dataclass(frozen=True)
class Begin:
    final_lsn: int  # the transaction's commit LSN
    commit_ms: int  # Unix milliseconds
    xid: int


@dataclass(frozen=True)
class Commit:
    commit_lsn: int
    end_lsn: int  # where a restart after this transaction begins
    commit_ms: int


@dataclass(frozen=True)
class Column:
    name: str
    type_oid: int
    typmod: int
    is_key: bool  # part of the replica identity


@dataclass(frozen=True)
class Relation:
    oid: int
    namespace: str
    name: str
    identity: str  # replica identity: d(efault), n(othing), f(ull), i(ndex)
    columns: tuple[Column, ...]

    @property
    def qualified(self) -> str:
        return f"{self.namespace}.{self.name}"


@dataclass(frozen=True)
class Type:
    oid: int
    namespace: str
    name: str


@dataclass(frozen=True)
class Insert:
    relation: int
    new: list[Any]


@dataclass(frozen=True)
class Update:
    relation: int
    old: list[Any] | None  # the replica identity's values ('K') or the whole old row ('O')
    old_is_key: bool
    new: list[Any]


@dataclass(frozen=True)
class Delete:
    relation: int
    old: list[Any]
    old_is_key: bool


@dataclass(frozen=True)
class Truncate:
    relations: tuple[int, ...]
    cascade: bool
    restart_identity: bool


@dataclass(frozen=True)
class Origin:
    lsn: int
    name: str


@dataclass(frozen=True)
class StreamStart:  # protocol 2: a block of an in-progress transaction's changes follows
    xid: int
    first: bool


@dataclass(frozen=True)
class StreamStop:
    pass


@dataclass(frozen=True)
class StreamCommit:
    xid: int
    commit_lsn: int
    end_lsn: int
    commit_ms: int


@dataclass(frozen=True)
class StreamAbort:
    xid: int
    subxid: int  # == xid: the whole transaction; else one subtransaction (a savepoint)


@dataclass(frozen=True)
class Message:  # pg_logical_emit_message(); only with the 'messages' option, ignored
    transactional: bool
    lsn: int
    prefix: str
    content: bytes


def _string(buf: bytes, at: int) -> tuple[str, int]:
    end = buf.index(0, at)
    return buf[at:end].decode("utf-8"), end + 1


def tuple_data(buf: bytes, at: int) -> tuple[list[Any], int]:
    """A TupleData: each column's text, None (NULL) or UNCHANGED; and the offset after it."""
    (count,) = _I16.unpack_from(buf, at)
    at += 2
    values: list[Any] = []
    append = values.append
    size = len(buf)
    for _ in range(count):
        kind = buf[at]
        at += 1
        if kind == 116:  # 't'
            (length,) = _I32.unpack_from(buf, at)
            at += 4
            if length < 0 or at + length > size:
                raise ValueError(f"pgoutput: a column value of {length} bytes at offset {at} "
                                 f"of a {size}-byte message")
            append(buf[at:at + length].decode("utf-8"))
            at += length
        elif kind == 110:  # 'n'
            append(None)
        elif kind == 117:  # 'u'
            append(UNCHANGED)
        elif kind == 98:  # 'b': binary (only with the 'binary' option, which sluice never sets)
            (length,) = _I32.unpack_from(buf, at)
            at += 4
            if length < 0 or at + length > size:
                raise ValueError(f"pgoutput: a column value of {length} bytes at offset {at} "
                                 f"of a {size}-byte message")
            append(bytes(buf[at:at + length]))
            at += length
        else:
            raise ValueError(f"pgoutput: unknown tuple column kind {chr(kind)!r}")
    return values, at


_STREAM_COMMIT = struct.Struct(">IbQQq")
_TWO_XIDS = struct.Struct(">II")
_IN_STREAM = frozenset(b"IUDRTYM")  # the messages that carry an xid inside a stream block


def decode_streamed(buf: bytes, in_stream: bool) -> tuple[Any, int | None]:
    """One message of protocol version 2 with streaming: (message, xid) where xid is the
    (sub)transaction of a change or relation sent inside a stream block, else None."""
    tag = buf[0]
    if in_stream and tag in _IN_STREAM:
        (xid,) = _U32.unpack_from(buf, 1)
        return decode(buf[:1] + buf[5:]), xid
    if tag == 83:  # 'S'
        (xid,) = _U32.unpack_from(buf, 1)
        return StreamStart(xid, bool(buf[5])), None
    if tag == 69:  # 'E'
        return StreamStop(), None
    if tag == 99:  # 'c'
        xid, _flags, lsn, end, ts = _STREAM_COMMIT.unpack_from(buf, 1)
        return StreamCommit(xid, lsn, end, ts // 1000 + PG_EPOCH_MS), None
    if tag == 65:  # 'A'
        xid, subxid = _TWO_XIDS.unpack_from(buf, 1)
        return StreamAbort(xid, subxid), None
    return decode(buf), None


def decode(buf: bytes) -> Any:
    """One pgoutput message (protocol version 1, or 2 outside stream blocks) as its
    dataclass."""
    tag = buf[0]
    if tag == 73:  # 'I'
        (oid,) = _U32.unpack_from(buf, 1)
        return Insert(oid, tuple_data(buf, 6)[0])  # 5 is 'N'
    if tag == 85:  # 'U'
        (oid,) = _U32.unpack_from(buf, 1)
        marker = buf[5]
        old = None
        at = 6
        if marker in (75, 79):  # 'K' / 'O'
            old, at = tuple_data(buf, 6)
            at += 1  # 'N'
        new, _ = tuple_data(buf, at)
        return Update(oid, old, marker == 75, new)
    if tag == 68:  # 'D'
        (oid,) = _U32.unpack_from(buf, 1)
        return Delete(oid, tuple_data(buf, 6)[0], buf[5] == 75)
    if tag == 66:  # 'B'
        lsn, ts, xid = _BEGIN.unpack_from(buf, 1)
        return Begin(lsn, ts // 1000 + PG_EPOCH_MS, xid)
    if tag == 67:  # 'C'
        _flags, lsn, end, ts = _COMMIT.unpack_from(buf, 1)
        return Commit(lsn, end, ts // 1000 + PG_EPOCH_MS)
    if tag == 82:  # 'R'
        (oid,) = _U32.unpack_from(buf, 1)
        namespace, at = _string(buf, 5)
        name, at = _string(buf, at)
        identity = chr(buf[at])
        (count,) = _I16.unpack_from(buf, at + 1)
        at += 3
        columns = []
        for _ in range(count):
            flags = buf[at]
            column, at = _string(buf, at + 1)
            type_oid, typmod = _COLUMN.unpack_from(buf, at)
            at += 8
            columns.append(Column(column, type_oid, typmod, bool(flags & 1)))
        return Relation(oid, namespace, name, identity, tuple(columns))
    if tag == 89:  # 'Y'
        (oid,) = _U32.unpack_from(buf, 1)
        namespace, at = _string(buf, 5)
        return Type(oid, namespace, _string(buf, at)[0])
    if tag == 84:  # 'T'
        (count,) = _I32.unpack_from(buf, 1)
        options = buf[5]
        oids = struct.unpack_from(f">{count}I", buf, 6)
        return Truncate(tuple(oids), bool(options & 1), bool(options & 2))
    if tag == 79:  # 'O'
        (lsn,) = _I64.unpack_from(buf, 1)
        return Origin(lsn, _string(buf, 9)[0])
    if tag == 77:  # 'M'
        transactional = bool(buf[1])
        (lsn,) = _I64.unpack_from(buf, 2)
        prefix, at = _string(buf, 10)
        (length,) = _I32.unpack_from(buf, at)
        if length < 0 or at + 4 + length > len(buf):
            raise ValueError(f"pgoutput: a logical message of {length} bytes in a "
                             f"{len(buf)}-byte message")
        return Message(transactional, lsn, prefix, bytes(buf[at + 4:at + 4 + length]))
    raise ValueError(f"pgoutput: unknown message type {chr(tag)!r} (protocol version 1 expected)")
