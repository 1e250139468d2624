"""Malformed input and values past what Avro holds (issue #58.4, #58.7): no server writes the
malformed bytes, but the tap must never publish an undecodable message nor stop without saying
why. The fast path (fastpath.py, and tuplecodec.c through native.py) hands such a change to the
general path, which raises a clear error; a timestamp past an Avro long is refused by both
paths alike. No server needed (the tap's stop is checked on a PgTap that never connects)."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest

from python_ingest.exceptions import TapError
from python_ingest.sources.postgres import events, native, pgoutput
from python_ingest.sources.postgres.fastpath import FastTable
from python_ingest.sources.postgres.wire import ReplicationStream
from python_ingest.sources.tap.changes import Envelope
from python_ingest.sources.tap.encoder import envelope_tail, long_bytes
from tests.sources.postgres.test_fastpath import OID, _insert, _table, _tuple

pytestmark = [pytest.mark.postgres_source, pytest.mark.reliability]

TAIL = envelope_tail("postgres", 5, None, False)
KINDS = (("id", "int8", "N", -1, ["1"]), ("t", "text", "S", -1, ["x"]),
         ("num", "numeric", "N", ((10 << 16) | 2) + 4, ["1.50"]),
         ("m", "money", "N", -1, ["$1.00"]), ("ts", "timestamp", "D", -1, ["2024-01-01 00:00:00"]))


def _text_column(value: bytes, declared: int) -> bytes:
    return b"t" + struct.pack(">i", declared) + value


def _encoders(fast: FastTable) -> list:
    """The encoders a table may use: the generated Python one, and the C one when built."""
    return [fast.python_encode] + ([fast.encode] if fast.encode is not fast.python_encode
                                   else [])


def test_lengths_past_the_message_or_negative_never_publish_a_message() -> None:
    """A text length past the end of the message (the value cut short) or a negative one: the
    fast path published the bytes that were there (a cut value, or garbage past a negative
    length); now it leaves the change to the general path, which raises saying why."""
    table = _table(KINDS)
    fast = FastTable.of(table)
    assert fast is not None
    header = b"I" + struct.pack(">I", OID) + b"N" + struct.pack(">h", 5)
    rest = _tuple(["x", "1.50", "$1.00", "2024-01-01 00:00:00"])[2:]
    for first in (_text_column(b"12", 400),  # 400 bytes declared, the message ends before
                  _text_column(b"12", -3)):
        payload = header + first + rest
        for encode in _encoders(fast):
            assert encode(payload, 6, 1, TAIL) is None, first
        with pytest.raises(ValueError, match="column value of"):
            pgoutput.decode(payload)
    cut = header + _text_column(b"1", 1) + _text_column(b"x", 9)  # the last value cut
    with pytest.raises(ValueError, match="column value of 9 bytes"):
        pgoutput.decode(cut)
    for encode in _encoders(fast):
        assert encode(cut, 6, 1, TAIL) is None
        assert encode(b"I\x00\x00", 6, 1, TAIL) is None  # the column count itself cut off


def test_a_numeric_or_money_text_decimal_cannot_read_goes_to_the_general_path() -> None:
    """decimal.InvalidOperation is no ValueError: it escaped the fast path's fallback and
    stopped the tap; now the general path takes the change (a null and an error record)."""
    table = _table(KINDS)
    fast = FastTable.of(table)
    assert fast is not None
    for values in (["1", "x", "1,5", "$1.00", "2024-01-01 00:00:00"],
                   ["1", "x", "1.50", "$", "2024-01-01 00:00:00"]):
        payload = _insert(values)
        for encode in _encoders(fast):
            assert encode(payload, 6, 1, TAIL) is None, values
        change = events.insert(table, pgoutput.decode(payload).new, 1,
                               Envelope("postgres", 5, None))
        assert [p.column for p in change.problems] == [("num", "m")[values[2] == "1.50"]]


@pytest.mark.parametrize("text", ["294247-01-10 04:00:54.775808", "294276-12-31 23:59:59.999999",
                                  "294276-12-31 23:59:59.999999+00"])
def test_a_timestamp_past_an_avro_long_is_refused_by_both_paths(text: str) -> None:
    """PostgreSQL's timestamps reach 294276 AD, an Avro timestamp-micros long only
    294247-01-10: the fast path (Python and C) wrote an invalid long that read back as
    1940-01-10; now both leave it to the general path, which lands a null and says why."""
    kind = "timestamptz" if text.endswith("+00") else "timestamp"
    columns = (("id", "int8", "N", -1, ["1"]), ("ts", kind, "D", -1, [text]))
    table = _table(columns)
    fast = FastTable.of(table)
    assert fast is not None
    payload = _insert(["1", text])
    for encode in _encoders(fast):
        assert encode(payload, 6, 1, TAIL) is None, encode
    change = events.insert(table, pgoutput.decode(payload).new, 1, Envelope("postgres", 5, None))
    with pytest.raises((ValueError, OverflowError)):
        table.encoder.encode(dict(change.record))
    # the last timestamp that fits is carried exactly by every path
    last = "294247-01-10 04:00:54.775807"
    payload = _insert(["1", last])
    found = [encode(payload, 6, 1, TAIL) for encode in _encoders(fast)]
    assert all(f == found[0] and f is not None for f in found)
    assert b"\x02" + long_bytes((1 << 63) - 1) in found[0][1]


def test_integers_past_64_bits_never_become_an_avro_long() -> None:
    columns = (("id", "int8", "N", -1, ["1"]), ("n", "int8", "N", -1, ["1"]))
    fast = FastTable.of(_table(columns))
    assert fast is not None
    for text in ("9223372036854775808", "-9223372036854775809", "1" * 30, "-" + "9" * 25):
        for encode in _encoders(fast):
            assert encode(_insert(["1", text]), 6, 1, TAIL) is None, text


def test_a_message_the_tap_cannot_read_stops_it_saying_where(tmp_path: Path) -> None:
    """A row change cut short (or empty) reaches the general path's decoding: the tap stops
    with a TapError naming the transaction, the bytes and its checkpoint (before: an
    IndexError or struct.error, a crash loop without a word of what)."""
    from python_ingest.config import load_settings
    from python_ingest.sources.postgres.tap import PgTap

    config = tmp_path / "sluice.yml"
    config.write_text(f"state_dir: {tmp_path / 'state'}\nsources:\n  s:\n    kind: postgres\n"
                      "    host: 127.0.0.1\n    database: d\n    user: u\n")
    settings = load_settings(config)
    tap = PgTap(settings, settings.source("s"))
    tap._commit_lsn = 0x16B3748
    cut = b"I" + struct.pack(">I", OID) + b"N" + struct.pack(">h", 2) + _text_column(b"1", 8)
    for payload in (cut, b"", b"I\x00", b"T" + struct.pack(">i", -1) + b"\x00"):
        with pytest.raises(TapError, match="in the transaction committed at 0/16B3748 cannot "
                                           "be read") as info:
            tap._message(payload)
        assert "Nothing of it was published" in str(info.value)
        assert tap.stats.messages == 0


def test_short_replication_messages_fail_the_stream_saying_so() -> None:
    """An XLogData ('w') shorter than its 25-byte header, a keepalive ('k') shorter than its
    17 bytes: the stream fails with a message saying so (before: an IndexError or
    struct.error from the reader, or 'unknown replication message type' for a short 'w')."""
    stream = ReplicationStream.__new__(ReplicationStream)
    for data in (b"w" + bytes(10), b"k" + bytes(5), b"k"):
        stream._failed, stream.wal_end = None, 0
        assert stream._other(data) is False
        assert stream._failed is not None and "shorter than its header" in stream._failed
    stream._failed = None
    assert stream._other(b"k" + struct.pack(">Qq?", 99, 0, False)) is True
    assert stream.wal_end == 99 and stream._failed is None


def test_a_compiler_that_hangs_is_killed_and_the_tap_runs_on_python(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """#58.7: the C compiler's call at start had no timeout: a hanging compiler held the tap
    forever. Now it is killed (its children too) past the timeout and the tap goes on without
    the C module."""
    compiler = tmp_path / "cc"
    pids = tmp_path / "pids"
    compiler.write_text(f"#!/bin/sh\nsleep 30 &\necho $! > {pids}\necho $$ >> {pids}\n"
                        "exec sleep 30\n")
    compiler.chmod(0o755)
    monkeypatch.setenv("CC", str(compiler))
    monkeypatch.setenv(native.NATIVE_DIR_ENV, str(tmp_path / "native"))
    monkeypatch.setenv(native.BUILD_TIMEOUT_ENV, "1")
    monkeypatch.setattr(native, "_loaded", [])  # this process's answer, asked again
    started = time.monotonic()
    assert native.codec() is None
    assert time.monotonic() - started < 10
    assert not list((tmp_path / "native").rglob("*.so"))
    deadline = time.monotonic() + 5
    alive = pids.read_text().split()
    while alive and time.monotonic() < deadline:  # killed: gone, or a zombie until reaped
        alive = [p for p in alive if Path(f"/proc/{p}/stat").exists() and
                 Path(f"/proc/{p}/stat").read_text().split()[2] != "Z"]
        time.sleep(0.1)
    assert not alive, "the compiler's processes outlived the timeout"
