"""The replication connection's traffic once streaming started: the server's messages read, and
its status updates written, by the tap itself through libpq (the library psycopg2 links), not
by psycopg2's ``ReplicationCursor.read_message`` / ``send_feedback``.

Why not psycopg2's: it moves the slot's flush position on its own. On a server keepalive it
confirms up to the server's WAL end whenever the flush position last sent is at or past the
start of the last data message received (psycopg/pqpath.c, pq_read_replication_message). That
holds in the middle of the stream: a long transaction's changes start below the commits
published before it, so a transaction read but not yet acknowledged by Kafka (or not read
whole) was confirmed to the server, which never sends it again: a crash or a failed delivery
lost it. Here the flush position sent is always the one the tap confirmed (``confirm``, after
its checkpoint is written), nothing else (docs/postgres-source.md, "Checkpoints").

The connection is also kept alive while the tap works on something long (a TRUNCATE's deletes
over a large topic, a slow broker's barrier, a table's first schema): a thread sends a status
update whenever nothing was sent for ``interval`` seconds, so the server's wal_sender_timeout
does not end the connection. A lock keeps the libpq calls on the connection one at a time.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import struct
import threading
import time
from typing import Any

from python_ingest.exceptions import TapError
from python_ingest.sources.postgres import native

_KEEPALIVE = struct.Struct(">Qq?")  # WAL end, send time, reply requested
_STATUS = struct.Struct(">cQQQq?")  # 'r', write, flush, apply, client time, reply requested
_PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in Unix microseconds
_XLOG_DATA, _PRIMARY_KEEPALIVE = 119, 107  # 'w', 'k'
_XLOG_HEADER = 25  # 'w', its start and WAL end LSNs, the send time; the payload follows
_WAL_END = struct.Struct(">Q").unpack_from
_string_at = ctypes.CFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_int)(
    ctypes._string_at_addr)  # type: ignore[attr-defined]  # string_at, minus its wrapper
_lib: Any = None


def _libpq() -> Any:
    """libpq as psycopg2 loaded it (its own copy in the binary wheel), its calls typed."""
    global _lib
    if _lib is not None:
        return _lib
    import psycopg2._psycopg as psycopg

    lib: Any = ctypes.CDLL(psycopg.__file__)  # the extension's dependencies: its libpq
    if not hasattr(lib, "PQgetCopyData"):
        lib = ctypes.CDLL(ctypes.util.find_library("pq") or "libpq.so.5")
    ptr, vptr, cint = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int
    for name, restype, argtypes in (
            ("PQgetCopyData", cint, (ptr, vptr, cint)),
            ("PQputCopyData", cint, (ptr, ctypes.c_char_p, cint)),
            ("PQflush", cint, (ptr,)),
            ("PQconsumeInput", cint, (ptr,)),
            ("PQfreemem", None, (ptr,)),
            ("PQgetResult", ptr, (ptr,)),
            ("PQresultErrorMessage", ctypes.c_char_p, (ptr,)),
            ("PQclear", None, (ptr,)),
            ("PQerrorMessage", ctypes.c_char_p, (ptr,))):
        function = getattr(lib, name)
        function.restype, function.argtypes = restype, argtypes
    _lib = lib
    return lib


class ReplicationStream:
    """The CopyBoth stream of a replication connection on which START_REPLICATION ran."""

    def __init__(self, conn: Any, confirmed: int, interval_s: float) -> None:
        self._lib = lib = _libpq()
        self._pg = ctypes.c_void_p(conn.pgconn_ptr)
        self._buffer = ctypes.c_void_p()
        self._into = ctypes.byref(self._buffer)  # (bound once: read runs per message)
        self._get, self._free = lib.PQgetCopyData, lib.PQfreemem
        self._lock = threading.Lock()
        self.wal_end = 0  # the server's WAL end, from its last message
        self._failed: str | None = None  # read_batch: the stream's failure, after its payloads
        module = native.codec()  # tuplecodec.c's read_copy, when built
        self._native: tuple[Any, tuple[int, ...]] | None = None if module is None else (
            module.read_copy, (conn.pgconn_ptr, *(ctypes.cast(f, ctypes.c_void_p).value or 0
                                                 for f in (lib.PQgetCopyData, lib.PQfreemem,
                                                           lib.PQconsumeInput))))
        self.confirmed = confirmed  # the flush position sent: only ``confirm`` moves it
        self.interval_s = interval_s
        self._sent = time.monotonic()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._keep_alive, daemon=True,
                                        name="sluice-pg-keepalive")
        self._thread.start()

    # ---- reading ----------------------------------------------------------------------

    def read_batch(self, limit: int = 512) -> list[bytes]:
        """The XLogData payloads already received (up to ``limit``), or none: read at once, under
        one hold of the lock, so that the tap's loop pays one call per batch, not one per
        message (bench/pg_tap_bench.py). Keepalives are consumed here (answered with the
        confirmed position when the server asks). A failure after some payloads returns those
        first and raises on the next call."""
        if self._failed is not None:
            raise TapError(self._failed)
        payloads: list[bytes] = []
        with self._lock:
            if self._native is not None:
                self._read_native(payloads, limit)
            else:
                self._read(payloads, limit)
        if self._failed is not None and not payloads:
            raise TapError(self._failed)
        return payloads

    def _read(self, payloads: list[bytes], limit: int) -> None:
        """read_batch's loop in Python (the lock held)."""
        pg, buffer, into, get, free = self._pg, self._buffer, self._into, self._get, self._free
        append = payloads.append
        consumed = False
        last = None
        while len(payloads) < limit:
            size = get(pg, into, 1)
            if size > 0:
                data = _string_at(buffer, size)
                free(buffer)
                consumed = True
                if data[0] == _XLOG_DATA and len(data) >= _XLOG_HEADER:
                    append(data[25:])
                    last = data
                    continue
                if self._other(data):
                    continue
                break
            if size == 0:
                if consumed:
                    break
                if self._lib.PQconsumeInput(pg):
                    consumed = True
                    continue
                self._failed = self._error()
                break
            self._failed = self._ended() if size == -1 else self._error()
            break
        if last is not None:
            self.wal_end = max(self.wal_end, _WAL_END(last, 9)[0])

    def _read_native(self, payloads: list[bytes], limit: int) -> None:
        """read_batch's loop in C (tuplecodec.c's read_copy, the same steps; the lock held)."""
        assert self._native is not None
        read, args = self._native
        while len(payloads) < limit:
            got, wal_end, other, status = read(*args, limit - len(payloads))
            payloads += got
            self.wal_end = max(self.wal_end, wal_end)
            if status == 2 and self._other(other):
                continue
            if status < 0:
                self._failed = self._ended() if status == -1 else self._error()
            break

    def _other(self, data: bytes) -> bool:
        """A message that is not XLogData: a keepalive is taken (True), anything else fails
        the stream (False)."""
        if data[0] == _XLOG_DATA or data[0] == _PRIMARY_KEEPALIVE and \
                len(data) < 1 + _KEEPALIVE.size:  # (a whole XLogData is read before this)
            self._failed = (f"a replication message {chr(data[0])!r} of {len(data)} bytes, "
                            "shorter than its header (the stream is damaged: nothing of it "
                            "was published; the checkpoint stays where it was)")
            return False
        if data[0] == _PRIMARY_KEEPALIVE:
            wal_end, _at, reply = _KEEPALIVE.unpack_from(data, 1)
            self.wal_end = max(self.wal_end, wal_end)
            if reply:
                self._status(False)
            return True
        self._failed = f"unknown replication message type {chr(data[0])!r}"
        return False

    def _error(self) -> str:
        text = self._lib.PQerrorMessage(self._pg) or b""
        return text.decode("utf-8", "replace").strip() or "the connection failed"

    def _ended(self) -> str:
        """The server ended the stream: its error."""
        texts = []
        while True:
            result = self._lib.PQgetResult(self._pg)
            if not result:
                break
            texts.append((self._lib.PQresultErrorMessage(result) or b"").decode(
                "utf-8", "replace").strip())
            self._lib.PQclear(result)
        return "; ".join(t for t in texts if t) or "the server ended the stream"

    # ---- writing ----------------------------------------------------------------------

    def confirm(self, lsn: int) -> None:
        """Confirm ``lsn`` to the server (the tap's checkpoint, written before): it may drop
        the WAL before it and never sends what committed before it again."""
        with self._lock:
            self.confirmed = max(self.confirmed, lsn)
            self._status(False)

    def ask(self) -> None:
        """A status update asking the server for a keepalive (which carries its WAL end)."""
        with self._lock:
            self._status(True)

    def _status(self, reply: bool) -> None:
        """Send a standby status update (the lock held)."""
        lsn = self.confirmed
        now = int(time.time() * 1_000_000) - _PG_EPOCH_US
        message = _STATUS.pack(b"r", lsn, lsn, lsn, now, reply)
        if self._lib.PQputCopyData(self._pg, message, len(message)) != 1 or \
                self._lib.PQflush(self._pg) != 0:
            raise TapError(self._error())
        self._sent = time.monotonic()

    def _keep_alive(self) -> None:
        """A status update whenever nothing was sent for ``interval_s`` (the tap is busy)."""
        while not self._closed.wait(self.interval_s / 2):
            if time.monotonic() - self._sent < self.interval_s:
                continue
            with self._lock:
                if self._closed.is_set():
                    return
                try:
                    self._status(False)
                except TapError:
                    return  # the connection is gone: the tap's next read says why

    def close(self) -> None:
        """Stop the keepalive thread (before the connection is closed)."""
        self._closed.set()
        with self._lock:
            pass
        self._thread.join(timeout=5)
