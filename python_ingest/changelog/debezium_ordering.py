"""The ``_ref_key`` of a Debezium change: strictly increasing per row, from its source position.

- MySQL/MariaDB: ``(binlog file index << 32) | (pos + row)``: ``pos`` is the row event's
  offset in its file and every row image takes at least one byte of the event, so ``pos + row``
  grows within a file; with ``ordering: gtid`` (failover between servers) MariaDB's GTID sequence
  number (``domain-server-seq``: the domain's count, which the new primary continues) instead
  of the file index; MySQL's ``uuid:n`` counts per server and stops the batch (``_binlog_ref``);
- PostgreSQL: the commit order of the change's transaction, then the change's LSN
  (``_pg_ref``): a transaction in flight at the snapshot and committed after it outranks the
  snapshot's rows; a change far before that commit takes its own LSN, checked against the
  partition's snapshot reads (``ReadBound``); one no key orders exactly stops the batch;
- otherwise (a documented fallback): the source's ``ts_us`` (or ``ts_ms`` × 1000): two changes
  of one row within the same microsecond are then ordered arbitrarily.

A snapshot read (``op: r``; binlog and fallback) takes the position just before the log
position its snapshot began at, so every streamed change of that row after it is newer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from python_ingest.exceptions import DecodeError, ReadError

ORDERINGS = ("position", "gtid")  # MySQL/MariaDB: binlog file/pos/row, or the GTID
_BINLOG = ("mysql", "mariadb")
_FILE_INDEX = re.compile(r"(\d+)$")
_MARIADB_GTID = re.compile(r"^\d+-\d+-(\d+)$")
_MYSQL_GTID = re.compile(r":(\d+)$")
# PostgreSQL ref keys: (bound << 22) | order, bound and order in WAL units of 16 bytes (every
# WAL record takes at least 24); LSNs below 2^45 (32 TiB, as the tap's)
PG_UNIT = 16
PG_SHIFT = 22
PG_MAX_LSN = ((1 << (63 - PG_SHIFT)) - 1) * PG_UNIT - 1  # its bound stays below 2^41
PG_WINDOW = ((1 << PG_SHIFT) - 2) * PG_UNIT  # how far before ``last`` a change is ordered
# in its ``last``'s range; further back it takes its own LSN (``_far``)
UNCHECKED = "needs its partition's snapshot-read bound"  # the driver finds it and reads again


@dataclass
class ReadBound:
    """The snapshot reads before a PostgreSQL change in its partition, in units of
    ``PG_UNIT``: the largest bound (``last // 16 + 1``) of a read that carries a ``last``
    (incremental and blocking snapshots), what a change far before its ``last`` is checked
    against (``_far``). ``before``: the largest such bound of the messages before the ones
    read here (None: not known yet; ``resolve`` finds it, else the read stops with
    ``UNCHECKED`` for the driver); ``seen``: the largest among the messages read here.
    ``check`` False (decoders outside a job's raw read: the error re-read, replays, tests)
    keys such a change by its own LSN unchecked: the key is the same either way."""

    check: bool = False
    before: int | None = 0
    seen: int = 0
    resolve: Callable[[], int | None] | None = None


def _binlog_ref(source: dict[str, Any], ordering: str, snapshot: bool) -> int | None:
    offset = int(source.get("pos") or 0) + int(source.get("row") or 0)
    if ordering == "gtid":
        if snapshot:  # snapshot reads carry no GTID: older than every streamed change
            return 1
        gtid = str(source.get("gtid") or "")
        if _MYSQL_GTID.search(gtid) and not _MARIADB_GTID.match(gtid):
            raise ReadError(
                f"ordering gtid cannot order MySQL changes (GTID {gtid}): MySQL counts each "
                "server's GTIDs apart (uuid:n), so after a failover the new primary's changes "
                "would rank below the old one's and the lake would keep stale rows. Set the "
                "job's ordering: position (one server; a failover then needs the job started "
                "over), or capture the tables with `sluice tap`, which follows failovers "
                "(docs/debezium.md, Ordering); nothing of this batch was committed")
        found = _MARIADB_GTID.match(gtid)
        if found is None:
            raise DecodeError(f"ordering gtid: a change without a GTID ({source.get('gtid')!r}"
                              "): turn GTIDs on in the server, or use ordering: position")
        return (int(found.group(1)) << 32) | (offset & 0xFFFFFFFF)
    found = _FILE_INDEX.search(str(source.get("file") or ""))
    if found is None:
        return None
    return (int(found.group(1)) << 32) | (offset & 0xFFFFFFFF)


def _sequence(source: dict[str, Any]) -> tuple[int | None, int | None]:
    """``source.sequence``, ``["<last commit lsn>", "<lsn>"]``: the commit LSN of the
    transaction Debezium streamed before this change's (None when it has none yet) and the
    change's LSN (an incremental snapshot's read has no ``source.lsn``, only this one)."""
    sequence = source.get("sequence")
    if not sequence:
        return None, None
    try:
        last, lsn = json.loads(sequence)[:2]
        return (None if last is None else int(last)), (None if lsn is None else int(lsn))
    except (ValueError, TypeError, IndexError, KeyError):
        raise DecodeError(f"source.sequence {sequence!r:.80} is not Debezium's "
                          '["<last commit lsn>", "<lsn>"]') from None


def _far(lsn: int, last: int, bounds: ReadBound | None) -> int:
    """The bound of a change more than ``PG_WINDOW`` before ``last``: its own LSN's, ``X +
    1`` (order 1). Against every other streamed change of its row that is exact: the row's
    lock puts another transaction's change of it before ``X`` (committed before) or after
    this transaction's commit, whose changes all rank above ``last``. Against a snapshot read
    of the row it is exact unless the read was streamed while this transaction was open: a
    read with ``last`` (an incremental or blocking snapshot, bound ``B``) earlier in the
    partition, ``X + 1 < B <= L + 1``, would outrank the change it does not hold. The largest
    earlier read bound decides (a read with ``B > L + 1`` was streamed after this
    transaction's commit: this message is a copy Debezium sent again, the original checked
    the same key); in that case the batch stops (never a tie: equal ref keys of one row are
    the same change to the merge, and the later one would be dropped)."""
    own = lsn // PG_UNIT + 1
    if bounds is None or not bounds.check:
        return own
    if bounds.before is None and bounds.resolve is not None:
        bounds.before = bounds.resolve()
    if bounds.before is None:
        raise ReadError(f"a PostgreSQL change at LSN {lsn} {UNCHECKED} (read again)")
    top = max(bounds.before, bounds.seen)
    if own < top <= last // PG_UNIT + 1:
        raise ReadError(
            f"a PostgreSQL change at LSN {lsn} was written {last - lsn} bytes of WAL before "
            f"the commit Debezium streamed before its transaction's ({last}), and a snapshot "
            f"read (an incremental or blocking snapshot, at the commit LSN "
            f"{(top - 1) * PG_UNIT} or later) was streamed while its transaction was open: "
            "no ref key orders it exactly against that read (its own LSN ranks below it, "
            f"the commit order holds only {PG_WINDOW / 2**20:.0f} MiB of WAL). Ordering it "
            "approximately could keep a stale row, so the batch stops, nothing committed; "
            "take the table's rows again from a new snapshot on a new topic and start the "
            "job over on it (docs/debezium.md, Ordering)")
    return own


def _pg_ref(source: dict[str, Any], snapshot: bool, bounds: ReadBound | None = None) -> int:
    """A PostgreSQL change's ref key: ``(bound << 22) | order``, ranking transactions in the
    order they committed (Debezium streams them so) and a transaction's changes by their
    ``lsn``, which a change's own ``lsn`` alone does not: a transaction in flight at the
    snapshot has changes below the snapshot's LSN.

    ``last`` is the commit LSN of the transaction streamed before (``source.sequence``); the
    key orders ``(last, lsn)``, in units of 16 bytes (``L = last // 16``, ``X = lsn // 16``):
    two changes of one row, or a change and a commit, lie at least 24 bytes of WAL apart, so
    the units keep every order. A streamed change with ``X > L`` takes bound ``X + 1`` and
    order 1; one written before that commit (``X <= L``, its transaction in flight when the
    previous one committed) bound ``L + 1`` and order ``2^22 - 1 - (L - X)``, growing with its
    ``lsn``; its transaction's changes after ``last`` take bounds ``>= L + 2`` and the next
    transaction's ``>`` this commit's units, so the order is exact. A change more than
    ``PG_WINDOW`` (64 MiB) of WAL before ``last`` takes its own LSN (``_far``).
    A snapshot row takes ``(L + 1) << 22``: above every change committed up to ``last``
    (streamed before the snapshot), below every change streamed after it. A snapshot without
    a ``last`` (a new connector: nothing streamed before it) takes 0, below every change."""
    last, at = _sequence(source)
    lsn = int(source["lsn"]) if source.get("lsn") is not None else at
    if lsn is None:
        if not snapshot:
            raise DecodeError("a Debezium PostgreSQL change without an LSN (source.lsn and "
                              "source.sequence): cannot order it")
        lsn = last or 0
    if snapshot:
        bound, order = (0, 0) if last is None else (last // PG_UNIT + 1, 0)
        if bound and bounds is not None:
            bounds.seen = max(bounds.seen, bound)
    elif last is None or lsn // PG_UNIT > last // PG_UNIT:
        bound, order = lsn // PG_UNIT + 1, 1
    else:
        bound, behind = last // PG_UNIT + 1, last // PG_UNIT - lsn // PG_UNIT
        order = (1 << PG_SHIFT) - 1 - behind
        if order < 1:
            bound, order = _far(lsn, last, bounds), 1
    if max(lsn, last or 0) > PG_MAX_LSN:
        raise DecodeError(f"PostgreSQL LSN {max(lsn, last or 0)} does not fit a ref key (at "
                          f"most {PG_MAX_LSN}): start the job over on a new topic "
                          "(docs/debezium.md, Ordering)")
    return (bound << PG_SHIFT) | order


def ref_key(event: dict[str, Any], ordering: str, bounds: ReadBound | None = None) -> int:
    """The change's ``_ref_key`` from its source position (the module's docstring);
    ``bounds``: its partition's snapshot reads so far (PostgreSQL, ``ReadBound``)."""
    source = event.get("source") or {}
    connector = str(source.get("connector") or "")
    ref: int | None = None
    if connector in _BINLOG:
        ref = _binlog_ref(source, ordering, event.get("op") == "r")
    elif connector == "postgresql" and (source.get("lsn") is not None
                                        or source.get("sequence")):
        return _pg_ref(source, event.get("op") == "r", bounds)
    if ref is None:  # the fallback: the change's time in microseconds
        us = source.get("ts_us") or event.get("ts_us")
        ms = source.get("ts_ms") or event.get("ts_ms")
        if us is not None:
            ref = int(us)
        elif ms is not None:
            ref = int(ms) * 1000
        else:
            raise DecodeError("Debezium event without a source position or time: cannot order it")
    if event.get("op") == "r":  # a snapshot read: just before the log position it began at
        ref = max(ref - 1, 0)
    return ref
