"""Text columns in every charset the server offers, converted to Unicode as the server does.

The binlog holds a text value as bytes in its column's charset. Python's codecs do not always
agree with the server (MariaDB's latin1 is cp1252 plus U+0081, U+008D, U+008F, U+0090, U+009D;
swe7, keybcs2, armscii8, geostd8, hp8, dec8 have no Python codec at all), so the tap converts
the way a ``SELECT`` over a utf8mb4 connection does, which is what bootstrap reads:

- UTF-8 (utf8mb3, utf8mb4), UCS-2, UTF-16(LE), UTF-32: Python's codecs (the same mapping);
- single-byte charsets: a 256-entry table the server builds once per charset
  (``CONVERT(CAST(0x00..0xFF AS CHAR CHARACTER SET cs) USING utf8mb4)``);
- multi-byte charsets (big5, sjis, cp932, ujis, eucjpms, euckr, gb2312, gbk): the server
  converts each distinct value (cached).

Bytes the server cannot map become '?' on both paths.
"""

from __future__ import annotations

import re
from typing import Any

from python_ingest.exceptions import UnsupportedColumn
from python_ingest.sources.binlog.columns import decode_text

_UNICODE = {"utf8mb4", "utf8mb3", "utf8", "ucs2", "utf16", "utf16le", "utf32"}
_NAME = re.compile(r"^[a-z0-9_]+$")
_CACHE_LIMIT = 100_000


class Charsets:
    """Charset names of collation ids, and Unicode text of bytes in a charset (the server's)."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._names: dict[int, str] = {}
        self._maxlen: dict[str, int] = {}
        self._tables: dict[str, dict[int, str]] = {}
        self._cache: dict[tuple[str, bytes], str] = {}
        with conn.cursor() as cur:
            cur.execute("SELECT ID, CHARACTER_SET_NAME FROM information_schema.COLLATIONS")
            self._names.update({int(i): str(c) for i, c in cur.fetchall() if i is not None})
            try:  # MariaDB 10.10+: every (charset, collation) pair has its own id here
                cur.execute("SELECT ID, CHARACTER_SET_NAME FROM "
                            "information_schema.COLLATION_CHARACTER_SET_APPLICABILITY")
                self._names.update({int(i): str(c) for i, c in cur.fetchall() if i is not None})
            except Exception:  # older servers and MySQL: no ID column there
                pass
            cur.execute("SELECT CHARACTER_SET_NAME, MAXLEN FROM information_schema.CHARACTER_SETS")
            self._maxlen = {str(c): int(n) for c, n in cur.fetchall()}

    def name(self, collation_id: int | None) -> str:
        """The charset of a collation id (``binary`` for none)."""
        if collation_id is None:
            return "binary"
        if collation_id not in self._names:
            raise UnsupportedColumn(f"the server has no collation with id {collation_id}")
        return self._names[collation_id]

    def decode(self, charset: str, raw: bytes) -> str:
        if charset in _UNICODE:
            try:
                return decode_text(charset, raw)
            except UnicodeDecodeError:
                return self._server(charset, raw)
        if self._maxlen.get(charset) == 1:
            table = self._tables.get(charset) or self._table(charset)
            return raw.decode("latin-1").translate(table)
        return self._server(charset, raw)

    def _convert(self, charset: str, raw: bytes) -> str:
        if not _NAME.match(charset) or charset not in self._maxlen:
            raise UnsupportedColumn(f"unknown charset {charset!r}")
        with self._conn.cursor() as cur:
            cur.execute(f"SELECT CONVERT(CAST(%s AS CHAR CHARACTER SET {charset}) USING utf8mb4)",
                        (raw,))
            row = cur.fetchone()
        value = row[0] if row else None
        if isinstance(value, bytes):
            value = value.decode("utf-8")
        if value is None:
            raise UnsupportedColumn(f"the server cannot convert {raw.hex()} from {charset}")
        return str(value)

    def _table(self, charset: str) -> dict[int, str]:
        text = self._convert(charset, bytes(range(256)))
        if len(text) != 256:
            raise UnsupportedColumn(f"charset {charset}: the server's table has {len(text)} "
                                    "characters, not 256")
        self._tables[charset] = {i: ch for i, ch in enumerate(text)}
        return self._tables[charset]

    def _server(self, charset: str, raw: bytes) -> str:
        key = (charset, raw)
        found = self._cache.get(key)
        if found is None:
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            found = self._cache[key] = self._convert(charset, raw)
        return found
