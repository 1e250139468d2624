"""Issue #58.7: the binlog fast path's memos stay bounded on high-cardinality columns.

A long-running tap over a SET column of many distinct member masks, or a DATETIME column of
many distinct dates, kept one memo entry per distinct value for good. The generated reader of
a table (fastpath.FastRows) reads row images here straight from bytes laid out as the binlog
lays them; its memos must stay within ``MEMO_LIMIT`` and every value must still be encoded
as a reader without any memo encodes it.
"""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest

from python_ingest.sources.binlog import decoding as d
from python_ingest.sources.binlog.columns import make_spec
from python_ingest.sources.binlog.events import TappedTable
from python_ingest.sources.binlog.fastpath import FastRows
from python_ingest.sources.binlog.fastpath_columns import MEMO_LIMIT
from python_ingest.sources.tap.producer import Encoder
from python_ingest.sources.tap.registry import KeyChoice, TableShape

pytestmark = pytest.mark.reliability

MEMBERS = tuple(f"m{n}" for n in range(64))
COLUMNS = [SimpleNamespace(type=d.LONG, unsigned=False),
           SimpleNamespace(type=d.SET, unsigned=False, size=8),
           SimpleNamespace(type=d.DATETIME2, unsigned=False, fsp=0)]


def _reader() -> FastRows:
    shape = TableShape("shop", "t", (make_spec("id", "long", nullable=False),
                                     make_spec("tags", "set", members=MEMBERS),
                                     make_spec("at", "datetime")), KeyChoice("primary", ("id",)))
    fast = FastRows.of(TappedTable(shape, 1, Encoder(1, shape.avro()), "t"), list(COLUMNS))
    assert fast is not None
    return fast


def _image(n: int) -> bytes:
    """Row ``n``: a distinct SET mask and a distinct date (one day after another)."""
    day = dt.date(1990, 1, 1) + dt.timedelta(days=n)
    ymd = ((day.year * 13 + day.month) << 5) | day.day
    packed = (1 << 39) | (ymd << 17) | (12 << 12) | (30 << 6) | 15  # 12:30:15
    return (b"\x00" + n.to_bytes(4, "little", signed=True) + (n * 7919 + 1).to_bytes(8, "little")
            + packed.to_bytes(5, "big"))


def test_set_and_date_memos_stay_bounded_and_values_stay_exact() -> None:
    fast = _reader()
    count = MEMO_LIMIT * 2 + 100
    bodies = []
    for n in range(count):
        image = _image(n)
        found = fast.image(image, 0)
        assert found is not None and found[0] == len(image)
        bodies.append(found[1])
    memos = fast.image.__globals__  # the generated reader's names (fastpath.FastRows)
    assert 0 < len(memos["S1"]) <= MEMO_LIMIT and 0 < len(memos["D2"]) <= MEMO_LIMIT
    fresh = _reader()  # no memo yet: the values as encoded without one
    for n in (0, MEMO_LIMIT - 1, MEMO_LIMIT, count - 1):
        again = fresh.image(_image(n), 0)
        assert again is not None and again[1] == bodies[n], n
