"""MySQL/MariaDB value forms that do not depend on a column: the raw parts of binlog values,
the zero-date policy (zero dates land before year 1), and the server's text forms of
DATE/DATETIME, TIME, INET6, JSON and ENUM/SET member lists. The calendar arithmetic and the
text forms every tap shares are in tap/values.py (re-exported here).
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

# Shared with the other taps (tap/values.py); re-exported here, their former home.
from python_ingest.sources.tap.values import DAY_MICROS as DAY_MICROS
from python_ingest.sources.tap.values import civil_from_days as civil_from_days
from python_ingest.sources.tap.values import date_text as date_text
from python_ingest.sources.tap.values import days_from_civil as days_from_civil
from python_ingest.sources.tap.values import float32_text as float32_text
from python_ingest.sources.tap.values import timestamp_text as timestamp_text

# ---- raw values from the binlog (decoding.read_value) ---------------------------------------

class RawDate(NamedTuple):
    year: int
    month: int
    day: int


class RawDateTime(NamedTuple):
    year: int
    month: int
    day: int
    hour: int
    minute: int
    second: int
    micro: int


class RawTimestamp(NamedTuple):
    seconds: int  # since 1970-01-01 00:00:00 UTC; 0 is the zero date
    micro: int


class RawTime(NamedTuple):
    micros: int  # signed


# ---- zero dates -------------------------------------------------------------------------------

_MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def valid_date(y: int, m: int, d: int) -> bool:
    if not (1 <= m <= 12 and d >= 1):
        return False
    leap = m == 2 and y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)
    return d <= _MONTH_DAYS[m - 1] + leap


ZERO_DAY = days_from_civil(0, 1, 1) - 1  # -0001-12-31: the day the zero date lands on


def zero_day(y: int, m: int, d: int) -> int:
    """The documented day of an invalid (zero, partial-zero) date in a NOT NULL column:
    ``y*416 + m*32 + d`` days before -0001-12-31, distinct for every distinct source value."""
    return ZERO_DAY - (y * 416 + m * 32 + d)


DATE_TEXT = re.compile(r"^(-?\d+)-(\d+)-(\d+)(?:[ T](\d+):(\d+):(\d+)(?:\.(\d+))?)?$")


def parse_date_text(text: str) -> tuple[int, int, int, int]:
    """(year, month, day, microseconds of the day) of the server's DATE/DATETIME text."""
    m = DATE_TEXT.match(text.strip())
    if not m:
        raise ValueError(f"unreadable date {text!r}")
    y, mo, d = int(m.group(1)), int(m.group(2)), int(m.group(3))
    h, mi, s = (int(m.group(i) or 0) for i in (4, 5, 6))
    micro = int((m.group(7) or "0").ljust(6, "0")[:6])
    return y, mo, d, ((h * 60 + mi) * 60 + s) * 1_000_000 + micro


def time_text(micros: int, fsp: int) -> str:
    """The server's text of a TIME: ``[-]HH:MM:SS`` and ``fsp`` fraction digits."""
    sign = "-" if micros < 0 else ""
    seconds, fraction = divmod(abs(micros), 1_000_000)
    text = f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return text + (f".{fraction:06d}"[: fsp + 1] if fsp else "")


_TIME_TEXT = re.compile(r"^(-)?(\d+):(\d+):(\d+)(?:\.(\d+))?$")


def time_micros(text: str) -> int:
    m = _TIME_TEXT.match(text.strip())
    if not m:
        raise ValueError(f"unreadable TIME {text!r}")
    micros = ((int(m.group(2)) * 60 + int(m.group(3))) * 60 + int(m.group(4))) * 1_000_000
    micros += int((m.group(5) or "0").ljust(6, "0")[:6])
    return -micros if m.group(1) else micros


def inet6_text(raw: bytes) -> str:
    """MariaDB's text of an INET6 (its ipv6_to_str): the first longest run of zero words is
    ``::``, IPv4-compatible and IPv4-mapped addresses end in dotted IPv4."""
    words = [raw[2 * i] << 8 | raw[2 * i + 1] for i in range(8)]
    gap_pos, gap_len, run_pos, run_len = -1, -1, -1, -1
    for i, word in enumerate([*words, 1]):
        if word == 0:
            run_pos, run_len = (run_pos, run_len + 1) if run_pos >= 0 else (i, 1)
        elif run_pos >= 0:
            if run_len > gap_len:
                gap_pos, gap_len = run_pos, run_len
            run_pos, run_len = -1, -1
    out, i = "", 0
    while i < 8:
        if i == gap_pos:
            out += "::" if i == 0 else ":"
            i += gap_len
            continue
        if i == 6 and gap_pos == 0 and (gap_len == 6 or (gap_len == 5 and words[5] == 0xFFFF)):
            return out + ".".join(str(b) for b in raw[12:])
        out += f"{words[i]:x}" + (":" if i != 7 else "")
        i += 1
    return out


def json_text(value: Any) -> str:
    """A decoded MySQL JSON document as JSON text."""

    def plain(v: Any) -> Any:
        if isinstance(v, bytes):
            return v.decode("utf-8")
        if isinstance(v, dict):
            return {plain(k): plain(x) for k, x in v.items()}
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v
    return json.dumps(plain(value), ensure_ascii=False)


def quoted_list(column_type: str) -> tuple[str, ...]:
    """The members of ``enum('a','b')`` / ``set('a','b')`` as information_schema writes them
    (a quote doubled, a backslash escaped)."""
    inner = column_type[column_type.index("(") + 1: column_type.rindex(")")]
    escapes = {"\\": "\\", "0": "\0", "n": "\n", "r": "\r", "Z": "\x1a", "'": "'", "t": "\t"}
    members = []
    for body in re.findall(r"'((?:[^'\\]|''|\\.)*)'", inner, flags=re.S):
        members.append(re.sub(r"''|\\(.)", lambda m: "'" if m.group(0) == "''"
                              else escapes.get(str(m.group(1)), str(m.group(1))), body,
                              flags=re.S))
    return tuple(members)
