"""Folders and files that hold source data (reports, error summaries): owner-only.

Error tables' reports quote rows of the source; on a shared machine they must not be readable
by other users (issue #9.13). A private folder is created (and, if it exists, tightened) to
0700, a private file written atomically with 0600.
"""

from __future__ import annotations

import os
from pathlib import Path


def private_dir(path: Path) -> Path:
    """``path`` as an owner-only folder (0700), created with its parents when missing."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_mode & 0o077:
        path.chmod(0o700)
    return path


def write_private(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` (0600) atomically: a temp file beside it, then a rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    tmp.replace(path)
    return path

