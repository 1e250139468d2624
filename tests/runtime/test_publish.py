"""publish_folder: a folder built under a temporary name appears whole or not at all."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from python_ingest.runtime.publish import STALE_S, publish_folder
from tests.concurrency import run_concurrently


def _complete(folder: Path) -> bool:
    return (folder / "done").is_file()


def test_the_folder_appears_whole_and_readable_by_every_user(tmp_path: Path) -> None:
    seen: list[bool] = []

    def fill(tmp: Path) -> None:
        (tmp / "part").write_text("1")
        seen.append((tmp_path / "out").exists())  # nothing at the final name while building
        (tmp / "done").write_text("")

    assert publish_folder(tmp_path / "out", fill, _complete) == tmp_path / "out"
    assert seen == [False]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["done", "part"]
    assert (tmp_path / "out").stat().st_mode & 0o777 == 0o755
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporary left


def test_a_failed_build_leaves_nothing_and_raises(tmp_path: Path) -> None:
    def fill(tmp: Path) -> None:
        (tmp / "part").write_text("1")
        raise RuntimeError("compiler failed")

    with pytest.raises(RuntimeError, match="compiler failed"):
        publish_folder(tmp_path / "out", fill, _complete)
    assert list(tmp_path.iterdir()) == []


def test_two_concurrent_builds_keep_one_folder(tmp_path: Path) -> None:
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def fill(tmp: Path) -> None:
        (tmp / "done").write_text(str(threading.get_ident()))
        barrier.wait()  # both built before either renames

    def build() -> None:
        try:
            publish_folder(tmp_path / "out", fill, _complete)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    run_concurrently(build)
    assert errors == []
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert _complete(tmp_path / "out")


def test_a_broken_leftover_is_replaced_and_old_temporaries_removed(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "half").write_text("")  # a build killed before it was whole
    old = tmp_path / ".out.tmp-killed"
    old.mkdir()
    os.utime(old, (time.time() - STALE_S - 60,) * 2)
    recent = tmp_path / ".out.tmp-running"  # another build still running: kept
    recent.mkdir()

    publish_folder(tmp_path / "out", lambda tmp: (tmp / "done").write_text(""), _complete)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["done"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.tmp-running", "out"]
