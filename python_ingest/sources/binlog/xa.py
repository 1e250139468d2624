"""XA transactions in the binlog: only committed ones are published (issue #9.12).

An XA transaction's row events are written when it is prepared (MariaDB: a GTID event flagged
``FL_PREPARED_XA``; MySQL: ``XA START``; then the rows, ``XA END`` and the XA_prepare event);
whether it commits is decided later, by an ``XA COMMIT`` or ``XA ROLLBACK`` naming its xid
further on in the binlog — perhaps much later, perhaps after the tap restarted. So the tap
holds an XA transaction's row events from its start until it is resolved: published on
``XA COMMIT`` (with the ref keys of their own positions: the prepared transaction keeps its
row locks, so no other change of those rows lies in between), dropped on ``XA ROLLBACK``.
``XA COMMIT ... ONE PHASE`` (MySQL logs it as an XA_prepare event with ``one_phase``) is an
ordinary commit.

While one is open or prepared, the tap's checkpoint stays at the transaction boundary before
the earliest of them (``resume_limit``), so a restarted tap reads its row events again; the
transactions after it are republished (at least once; the merge's ref-key order makes that
harmless).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from python_ingest.sources.binlog.position import BinlogPosition

FL_PREPARED_XA = 0x40  # MariaDB's GTID event flag: the transaction is an XA PREPARE
_XA = re.compile(r"^XA\s+(START|BEGIN|END|COMMIT|ROLLBACK)\s+(.*?)(?:\s+ONE\s+PHASE)?\s*;?\s*$",
                 re.IGNORECASE | re.DOTALL)


def xa_statement(query: str) -> tuple[str, str] | None:
    """``(verb, xid)`` of an XA statement (verb upper case, xid as the binlog writes it, e.g.
    ``X'61',X'',1``), else None."""
    match = _XA.match(query.strip())
    if match is None:
        return None
    return match.group(1).upper(), " ".join(match.group(2).split())


@dataclass
class XaTransaction:
    """One XA transaction's held row events: (rows event, change kind, binlog file)."""

    start: BinlogPosition  # the transaction boundary before it: where a restart reads it again
    events: list[tuple[Any, str, str]] = field(default_factory=list)
    xid: str | None = None


class XaTransactions:
    """The XA transaction being read, and the prepared ones waiting for their outcome."""

    def __init__(self) -> None:
        self.open: XaTransaction | None = None
        self.prepared: dict[str, XaTransaction] = {}

    def begin(self, start: BinlogPosition) -> None:
        if self.open is None:
            self.open = XaTransaction(start)

    def hold(self, event: Any, kind: str, file: str) -> bool:
        """Keep a rows event of the open XA transaction; False when none is open."""
        if self.open is None:
            return False
        self.open.events.append((event, kind, file))
        return True

    def end(self, xid: str) -> None:
        if self.open is not None:
            self.open.xid = xid

    def prepare(self, one_phase: bool) -> XaTransaction | None:
        """XA PREPARE: the open transaction waits for its outcome. ``one_phase`` (XA COMMIT
        ... ONE PHASE): it is committed, returned to be published now."""
        done, self.open = self.open, None
        if done is None or one_phase:
            return done
        self.prepared[done.xid or f"?{len(self.prepared)}"] = done
        return None

    def statement(self, query: str, last_end: BinlogPosition
                  ) -> tuple[str, XaTransaction | None] | None:
        """Follow an XA statement (``last_end``: the last transaction end). XA START begins
        holding (MySQL), XA END names the held events, XA ROLLBACK drops them; XA COMMIT
        returns (xid, its held events, None when not seen by this tap) to publish."""
        found = xa_statement(query)
        if found is None:
            return None
        verb, xid = found
        if verb in ("START", "BEGIN"):
            self.begin(last_end)
        elif verb == "END":
            self.end(xid)
        elif verb == "COMMIT":
            return xid, self.resolve(xid)
        else:
            self.resolve(xid)  # rolled back: its row events are dropped
        return None

    def resolve(self, xid: str) -> XaTransaction | None:
        """XA COMMIT / XA ROLLBACK of ``xid``: its held events (None: not seen by this tap)."""
        return self.prepared.pop(xid, None)

    @property
    def resume_limit(self) -> BinlogPosition | None:
        """The checkpoint may not pass this position (None: no limit)."""
        starts = [t.start for t in self.prepared.values()]
        if self.open is not None:
            starts.append(self.open.start)
        return min(starts, default=None)
