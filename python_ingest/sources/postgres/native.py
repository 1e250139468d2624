"""The tap's per-row work in C (tuplecodec.c): built here with the machine's C compiler, used by
fastpath.py (the encoder) and wire.py (the stream's reading loop) when it is there.

fastpath.py's generated Python encoder stays the reference: the C encoder gives the same bytes
(tests/sources/postgres/test_native.py compares them type by type) and hands every row it does
not handle exactly to the Python one. A row costs it about a tenth of the Python encoder's
time, and reading the stream in C saves three ctypes calls a message (docs/postgres-source.md,
"Speed"): together what brings the tap near a bare reader's speed.

The module is compiled once per source text and Python version into ``$SLUICE_NATIVE_DIR`` or
the repository's ``.sluice/native`` (``make setup`` does it: ``python -m
python_ingest.sources.postgres.native``); without a compiler, or with ``SLUICE_NATIVE=0``, the
tap runs on the Python encoder alone, slower but the same.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from types import ModuleType

log = logging.getLogger(__name__)

NATIVE_ENV = "SLUICE_NATIVE"  # "0": the Python encoder alone
NATIVE_DIR_ENV = "SLUICE_NATIVE_DIR"
BUILD_TIMEOUT_ENV = "SLUICE_NATIVE_BUILD_TIMEOUT_S"
SOURCE = Path(__file__).with_name("tuplecodec.c")
# read once, with the Python modules: a process that imported this code builds and loads the C
# of the same checkout, even when the file changes on disk while it runs
_TEXT = SOURCE.read_bytes() if SOURCE.exists() else b""
_NAME = "_tuplecodec"
_loaded: list[ModuleType | None] = []  # [module or None] once tried


def target() -> Path:
    """Where the compiled module of this source text and this Python lives."""
    override = os.environ.get(NATIVE_DIR_ENV)
    root = Path(override).expanduser() if override else \
        Path(__file__).resolve().parents[3] / ".sluice" / "native"
    digest = hashlib.sha256(_TEXT + sys.version.encode()).hexdigest()[:16]
    return root / digest / (_NAME + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))


def build_timeout_s() -> float:
    """How long the compiler may take (``$SLUICE_NATIVE_BUILD_TIMEOUT_S``, default 120 s): a
    compiler that hangs (a wrapper waiting on a network licence, a stuck ccache) must not hold
    the tap's start; past it the compiler is killed and the tap runs on Python."""
    try:
        return float(os.environ.get(BUILD_TIMEOUT_ENV, "") or 120.0)
    except ValueError:
        return 120.0


def build() -> Path:
    """Compile tuplecodec.c (nothing when it is built already); raises OSError,
    subprocess.CalledProcessError or subprocess.TimeoutExpired saying why it cannot."""
    out = target()
    if out.exists():
        return out
    if not _TEXT:
        raise OSError(f"{SOURCE} is missing")
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise OSError("no C compiler (cc or gcc) on the PATH")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        built, source = Path(tmp) / out.name, Path(tmp) / SOURCE.name
        source.write_bytes(_TEXT)
        _compile([compiler, "-O2", "-shared", "-fPIC", "-Wall",
                  f"-I{sysconfig.get_paths()['include']}", str(source), "-o", str(built)])
        os.replace(built, out)  # whole or not at all, when two processes build at once
    return out


def _compile(command: list[str]) -> None:
    """Run the compiler in its own process group, all of it killed past the timeout (cc's
    own children too, which would outlive a kill of cc alone)."""
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as process:
        timeout = build_timeout_s()
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise subprocess.TimeoutExpired(command[0], timeout) from None
    if process.returncode != 0:
        raise subprocess.CalledProcessError(process.returncode, command, out, err)


def codec() -> ModuleType | None:
    """tuplecodec.c's module, built when missing; None when switched off or it cannot be built
    (said once in the log)."""
    if _loaded:
        return _loaded[0]
    module = None
    if os.environ.get(NATIVE_ENV, "1") != "0":
        try:
            path = build()
            loader = importlib.machinery.ExtensionFileLoader(_NAME, str(path))
            spec = importlib.util.spec_from_loader(_NAME, loader)
            assert spec is not None
            module = importlib.util.module_from_spec(spec)
            loader.exec_module(module)
        except (OSError, ImportError, subprocess.SubprocessError) as exc:
            detail = getattr(exc, "stderr", None) or exc
            log.info("the PostgreSQL tap's C encoder is not available (%s); it reads and "
                     "encodes in Python (slower, the same bytes)", str(detail).strip()[:500])
            module = None
    _loaded.append(module)
    return module


if __name__ == "__main__":  # make setup
    print(f"sluice: the PostgreSQL tap's C encoder: {build()}")
