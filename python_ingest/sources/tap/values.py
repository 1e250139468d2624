"""Value forms every tap shares, whatever its database: calendar arithmetic for every year
(Python's ``date`` stops at year 1; MySQL's zero dates and PostgreSQL's BC dates land before
it), the text of dates and timestamps as the lake renders them, and the shortest exact text of
a FLOAT. The database's own forms stay in its package (binlog/values.py, postgres/columns.py).
"""

from __future__ import annotations

import struct

# ---- calendar arithmetic for every year (Python's date stops at year 1) -----------------------

DAY_MICROS = 86_400_000_000


def days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (any year, H. Hinnant)."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def civil_from_days(z: int) -> tuple[int, int, int]:
    z += 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + (3 if mp < 10 else -9)
    return yoe + era * 400 + (m <= 2), m, d


# ---- text forms ------------------------------------------------------------------------------

def date_text(days: int) -> str:
    y, m, d = civil_from_days(days)
    return f"{'-' if y < 0 else ''}{abs(y):04d}-{m:02d}-{d:02d}"


def timestamp_text(micros: int) -> str:
    """``YYYY-MM-DD HH:MM:SS.ffffff`` of micros since the epoch (UTC), any year."""
    days, rest = divmod(micros, DAY_MICROS)
    seconds, micro = divmod(rest, 1_000_000)
    return (f"{date_text(days)} {seconds // 3600:02d}:{seconds // 60 % 60:02d}:"
            f"{seconds % 60:02d}.{micro:06d}")


def float32_text(value: float) -> str:
    """The shortest text that reads back as the same IEEE single."""
    packed = struct.pack("<f", value)
    for digits in range(1, 10):
        text = f"{value:.{digits}g}"
        try:
            if struct.pack("<f", float(text)) == packed:
                return text
        except OverflowError:  # rounded beyond the largest float
            continue
    return repr(value)
