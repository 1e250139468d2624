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


@pytest.mark.reliability
def test_the_lsn_bound_names_a_remedy_that_works() -> None:
    """LSNs never go back on a cluster: "start the source over" (a new slot, a bootstrap)
    cannot help; a new cluster, and the tables started over, can (#50.15)."""
    from python_ingest.sources.postgres.position import MAX_COMMIT_LSN

    assert ref_key(MAX_COMMIT_LSN, 0) > 0
    with pytest.raises(TapError, match=r"new cluster.*pg_dump.*start each of its tables over"):
        ref_key(MAX_COMMIT_LSN + 1, 0)
