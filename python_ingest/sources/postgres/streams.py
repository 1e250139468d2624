"""Large transactions streamed before they commit (pgoutput protocol version 2, ``streaming:
true``), held until their Stream Commit.

The server streams such a transaction in blocks (Stream Start ... Stream Stop) while it runs,
its changes and Relation messages each carrying their (sub)transaction's xid. They are held in
memory until the Stream Commit, then handed on as one transaction (Begin, the changes in
order, Commit) with its commit LSN; an aborted transaction hands on nothing, and a savepoint
rolled back only its Relation (and Type) messages (docs/postgres-source.md, "Large
transactions"): the server counts a table's Relation message as sent for the whole
transaction, and once it commits for the connection's life, whichever savepoint carried it,
so dropping it would leave the table's later changes without a shape.
"""

from __future__ import annotations

from typing import Any

from python_ingest.sources.postgres import pgoutput

_SHAPES = (pgoutput.Relation, pgoutput.Type)  # kept whatever becomes of their savepoint


class HeldStreams:
    """The streamed transactions not committed yet, and what became of those that ended."""

    def __init__(self) -> None:
        self.reading: int | None = None  # the xid of the stream block being read
        self.held: dict[int, list[tuple[int, Any]]] = {}  # xid → (subxid, message), in order
        self.counts = {"committed": 0, "aborted": 0}

    def read(self, payload: bytes) -> list[Any]:
        """The messages to handle now, in order: a message outside the stream blocks, a
        committed transaction whole, or nothing (a message held, a stream boundary)."""
        msg, xid = pgoutput.decode_streamed(payload, self.reading is not None)
        kind = type(msg)
        if kind is pgoutput.StreamStart:
            self.reading = msg.xid
            self.held.setdefault(msg.xid, [])
        elif kind is pgoutput.StreamStop:
            self.reading = None
        elif kind is pgoutput.StreamCommit:
            held = self.held.pop(msg.xid, [])
            self.counts["committed"] += 1
            return [pgoutput.Begin(msg.commit_lsn, msg.commit_ms, msg.xid),
                    *(change for _sub, change in held),
                    pgoutput.Commit(msg.commit_lsn, msg.end_lsn, msg.commit_ms)]
        elif kind is pgoutput.StreamAbort:
            if msg.subxid == msg.xid:
                self.held.pop(msg.xid, None)
                self.counts["aborted"] += 1
            else:
                self.held[msg.xid] = [(sub, change) for sub, change in
                                      self.held.get(msg.xid, [])
                                      if sub != msg.subxid or type(change) in _SHAPES]
        elif xid is not None and self.reading is not None:  # its Relations too, in order:
            self.held[self.reading].append((xid, msg))  # its DDL locks the table
        else:
            return [msg]
        return []
