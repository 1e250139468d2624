"""MariaDB GTID positions: where the tap is in the history of a replication topology, on any of
its servers (issue #35.8).

A MariaDB GTID ``domain-server_id-sequence`` names one transaction wherever it was replicated;
a *position* is the last GTID seen per domain (``0-1-981,1-7-12``), as in ``@@gtid_binlog_pos``
and ``BINLOG_GTID_POS(file, pos)``. A binlog file and offset mean something on one server
only; a GTID position means the same on the primary and on every replica that logs what it
applies (``log_slave_updates``), so after a failover the tap resumes from it (the server
streams from the transaction after it, MariaDB's ``MASTER_USE_GTID``).

A server's history holds a GTID ``d-s-n`` when its ``@@gtid_binlog_state`` (the last sequence
number per domain and server_id that its binlog ever held) has ``d-s-m`` with ``m >= n``.
MySQL's GTIDs (``uuid:n``) are not parsed here: on MySQL the tap resumes by file and position.
"""

from __future__ import annotations

import re

_GTID = re.compile(r"^(\d+)-(\d+)-(\d+)$")

Gtid = tuple[int, int, int]  # domain, server_id, sequence number


def parse(text: str | None) -> dict[int, Gtid] | None:
    """The GTID position ``text`` per domain; ``{}`` for ''; None when it is not a MariaDB
    GTID list (None, or a MySQL GTID)."""
    if text is None:
        return None
    state: dict[int, Gtid] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        m = _GTID.match(part)
        if m is None:
            return None
        domain, server_id, seq = (int(g) for g in m.groups())
        state[domain] = (domain, server_id, seq)
    return state


def text(state: dict[int, Gtid]) -> str:
    """``d-s-n,...`` ordered by domain (the form ``@@gtid_binlog_pos`` has)."""
    return ",".join(f"{d}-{s}-{n}" for d, s, n in (state[k] for k in sorted(state)))


def advance(position: str | None, gtid: str) -> str:
    """The position after the transaction ``gtid`` (one ``d-s-n``): its domain moves on,
    the other domains stay."""
    state = parse(position) or {}
    state.update(parse(gtid) or {})
    return text(state)


def missing(position: str, binlog_state: str) -> list[str]:
    """The GTIDs of ``position`` that a server whose ``@@gtid_binlog_state`` is
    ``binlog_state`` (one ``d-s-n`` per domain and server_id) never held in its binlog."""
    held: dict[tuple[int, int], int] = {}
    for part in binlog_state.split(","):
        m = _GTID.match(part.strip())
        if m is not None:
            d, s, n = (int(g) for g in m.groups())
            held[(d, s)] = max(n, held.get((d, s), 0))
    return [f"{d}-{s}-{n}" for d, s, n in (parse(position) or {}).values()
            if held.get((d, s), -1) < n]
