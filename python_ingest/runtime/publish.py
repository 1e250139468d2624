"""A folder built under a temporary name beside its final one, then renamed into place: a
reader finds it whole or not at all. Used for what ``make setup`` and first runs build into the
state dir: the pinned jars (``jars.py``, ``connect.py``) and the local file system's jar
(``localfs.py``)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

STALE_S = 3600  # a temporary folder this old was left by a killed build


def publish_folder(final: Path, fill: Callable[[Path], None], complete: Callable[[Path], bool],
                   stale: str | None = None) -> Path:
    """Build ``final`` once: ``fill`` writes the temporary folder, which is renamed to
    ``final``. Safe to run concurrently: the loser of the rename keeps the winner's folder
    (``complete`` says whether a folder there is whole) and deletes its own; a folder there
    that is not whole (a leftover) is replaced. Temporary folders older than an hour matching
    ``stale`` (a glob beside ``final``; by default this folder's) are removed first. The folder
    is readable by every user (mode 0755). Returns ``final``."""
    final.parent.mkdir(parents=True, exist_ok=True)
    cutoff = time.time() - STALE_S
    for leftover in final.parent.glob(stale or f".{final.name}.tmp*"):
        try:
            if leftover.stat().st_mtime < cutoff:
                shutil.rmtree(leftover, ignore_errors=True)
        except OSError:
            pass
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp", dir=final.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; these files are for every user
        fill(tmp)
        try:
            tmp.rename(final)
        except OSError:
            if complete(final):
                return final  # another build won the race: its folder stays
            if not final.exists():
                raise
            broken = final.with_name(f".{final.name}.tmp-broken-{os.getpid()}")
            final.rename(broken)
            shutil.rmtree(broken, ignore_errors=True)
            tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
