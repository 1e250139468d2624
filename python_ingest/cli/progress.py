"""Progress lines of long work (bootstrap, verify, benchmarks): one line redrawn in place on a
terminal, plain lines (a log) when the output is not a terminal."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TextIO


def printer(stream: TextIO | None = None) -> Callable[[str], None]:
    """A progress callback: redraws one line on a terminal; prints lines otherwise.

    A line that does not end with ``...`` is final (``done``): the next one starts below it.
    """
    out = stream or sys.stderr
    tty = bool(getattr(out, "isatty", lambda: False)())

    def show(line: str) -> None:
        if tty:
            out.write(f"\r{line}\x1b[K")
            if not line.endswith("..."):
                out.write("\n")
        else:
            out.write(f"{line}\n")
        out.flush()

    return show
