"""Ref keys of PostgreSQL changes (python_ingest/sources/postgres/position.py)."""

from __future__ import annotations

import pytest

from python_ingest.exceptions import TapError
from python_ingest.sources.postgres.position import MAX_CHANGES, ref_key

pytestmark = pytest.mark.postgres_source


def test_ref_keys_increase_through_a_large_transaction_and_stay_below_the_next() -> None:
    lsn = 0x16B374F  # low bits set: an index past 2^18 must carry into them, not OR with them
    indexes = (0, 1, (1 << 18) - 1, 1 << 18, (1 << 18) + 1, 3 << 18, MAX_CHANGES - 1)
    refs = [ref_key(lsn, i) for i in indexes]
    assert refs == sorted(set(refs))
    assert refs[-1] < ref_key(lsn + 24, 0)  # the next commit record is 24 bytes on at least
    with pytest.raises(TapError, match="more than"):
        ref_key(lsn, MAX_CHANGES)
