"""The ``_ref_key`` of a Debezium change: strictly increasing per row, from its source position.

- MySQL/MariaDB: ``(binlog file index << 32) | (pos + row)``: ``pos`` is the row event's
  offset in its file and every row image takes at least one byte of the event, so ``pos + row``
  grows within a file; with ``ordering: gtid`` (failover between servers) MariaDB's GTID sequence
  number (``domain-server-seq``: the domain's count, which the new primary continues) instead
  of the file index; MySQL's ``uuid:n`` counts per server and stops the batch (``_binlog_ref``);
- PostgreSQL: the commit order of the change's transaction, then the change's LSN
  (``_pg_ref``): a transaction in flight at the snapshot and committed after it outranks the
  snapshot's rows; a change the ref key cannot order exactly stops the batch;
- otherwise (a documented fallback): the source's ``ts_us`` (or ``ts_ms`` × 1000): two changes
  of one row within the same microsecond are then ordered arbitrarily.

A snapshot read (``op: r``; binlog and fallback) takes the position just before the log
position its snapshot began at, so every streamed change of that row after it is newer.
"""

from __future__ import annotations

import json
import re
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


def _last_commit(source: dict[str, Any]) -> int | None:
    """The commit LSN of the transaction Debezium streamed before this change's (the first of
    ``source.sequence``, ``["<last commit lsn>", "<lsn>"]``); None when it has none yet."""
    sequence = source.get("sequence")
    if not sequence:
        return None
    try:
        last = json.loads(sequence)[0]
    except (ValueError, TypeError, IndexError, KeyError):
        raise DecodeError(f"source.sequence {sequence!r:.80} is not Debezium's "
                          '["<last commit lsn>", "<lsn>"]') from None
    return None if last is None else int(last)


def _pg_ref(source: dict[str, Any], snapshot: bool) -> int:
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
    ``PG_WINDOW`` (64 MiB) of WAL before ``last`` has no exact key: the batch stops (never a
    tie: equal ref keys of one row are the same change to the merge, and the later one would
    be dropped).
    A snapshot row takes ``(L + 1) << 22``: above every change committed up to ``last``
    (streamed before the snapshot), below every change streamed after it. A snapshot without
    a ``last`` (a new connector: nothing streamed before it) takes 0, below every change."""
    lsn = int(source["lsn"])
    last = _last_commit(source)
    if snapshot:
        bound, order = (0, 0) if last is None else (last // PG_UNIT + 1, 0)
    elif last is None or lsn // PG_UNIT > last // PG_UNIT:
        bound, order = lsn // PG_UNIT + 1, 1
    else:
        bound, behind = last // PG_UNIT + 1, last // PG_UNIT - lsn // PG_UNIT
        order = (1 << PG_SHIFT) - 1 - behind
        if order < 1:
            raise ReadError(
                f"a PostgreSQL change at LSN {lsn} was written {last - lsn} bytes of WAL before "
                f"the commit Debezium streamed before its transaction's ({last}), more than "
                f"the {PG_WINDOW / 2**20:.0f} MiB a ref key orders exactly: a long transaction "
                "committed after others. Ordering it approximately could keep a stale row, so "
                "the batch stops, nothing committed; take the table's rows again from a new "
                "snapshot on a new topic and start the job over on it (docs/debezium.md, "
                "Ordering)")
    if max(lsn, last or 0) > PG_MAX_LSN:
        raise DecodeError(f"PostgreSQL LSN {max(lsn, last or 0)} does not fit a ref key (at "
                          f"most {PG_MAX_LSN}): start the job over on a new topic "
                          "(docs/debezium.md, Ordering)")
    return (bound << PG_SHIFT) | order


def ref_key(event: dict[str, Any], ordering: str) -> int:
    """The change's ``_ref_key`` from its source position (the module's docstring)."""
    source = event.get("source") or {}
    connector = str(source.get("connector") or "")
    ref: int | None = None
    if connector in _BINLOG:
        ref = _binlog_ref(source, ordering, event.get("op") == "r")
    elif connector == "postgresql" and source.get("lsn") is not None:
        return _pg_ref(source, event.get("op") == "r")
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
