"""tables.follow without a server: which table (relation oid) each name stands for, in
stream order (python_ingest/sources/postgres/tables.py)."""

from __future__ import annotations

import pytest

from python_ingest.sources.postgres import tables
from python_ingest.sources.postgres.pgoutput import Column, Relation

pytestmark = pytest.mark.postgres_source


def _rel(oid: int, name: str) -> Relation:
    return Relation(oid, "public", name, "d", (Column("id", 23, -1, True),))


def test_first_same_recreated_renamed_and_older() -> None:
    oids: dict = {}
    assert tables.follow(oids, _rel(10, "a"), 100)[0] == tables.FIRST
    assert tables.follow(oids, _rel(10, "a"), 200)[0] == tables.SAME
    assert tables.follow(oids, _rel(20, "b"), 210)[0] == tables.FIRST
    verdict, why = tables.follow(oids, _rel(11, "a"), 300)  # DROP a; CREATE a
    assert verdict == tables.RECREATED and "relation oid 10 -> 11" in why
    # a swap: b's table (20) is renamed to a, a's (11) to b
    verdict, why = tables.follow(oids, _rel(20, "a"), 400)
    assert verdict == tables.RENAMED and "is now the table that was public.b" in why
    verdict, why = tables.follow(oids, _rel(11, "b"), 410)
    assert verdict == tables.RENAMED and "is now the table that was public.a" in why
    # a bootstrap of a records its oid from its snapshot point: an older table before it
    oids["public.a"] = tables.snapshot_entry(30, 500)
    assert tables.follow(oids, _rel(20, "a"), 450) == (tables.OLDER, "")
    assert oids["public.a"]["oid"] == 30  # left as the bootstrap wrote it
    assert tables.follow(oids, _rel(30, "a"), 450)[0] == tables.SAME
