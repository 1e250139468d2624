"""Processes sluice starts or waits on: the host name it records, whether a lease's holder died
on this host, a free port for, the wait on and the stop of a private server (MariaDB for the
tap's tests and demo, PostgreSQL for dispersal, a Spark standalone cluster, S3Proxy, Apicurio
Registry)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from python_ingest.exceptions import SetupError

HOST_ENV = "SLUICE_HOST"


def host_name() -> str:
    """The name of this host as sluice records it in leases, runner claims and the status file:
    ``SLUICE_HOST`` when set (two runners on one machine posing as two hosts, or a container
    whose host name changes on every start), else the system's host name. Processes that
    record one name must be able to see each other's pids: a holder named with this host's
    name whose pid is gone is taken as dead."""
    return os.environ.get(HOST_ENV, "").strip() or socket.gethostname()


def free_port() -> int:
    """A TCP port free on the loopback interface now (for a private server sluice starts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def await_answer(process: subprocess.Popen[bytes], answers: Callable[[], bool],
                 stop: Callable[[], None], *, what: str, url: str, log: Path, wait_s: float,
                 pause_s: float) -> None:
    """Wait for a server just started to answer (``answers()``, asked every ``pause_s``) while
    its ``process`` runs, at most ``wait_s``; else ``stop()`` it and raise a SetupError that
    names ``what`` at ``url`` and shows the end of its ``log``."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and process.poll() is None:
        if answers():
            return
        time.sleep(pause_s)
    stop()
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
    raise SetupError(f"{what} did not answer on {url} within {wait_s:.0f}s (log {log}):\n{tail}")


def gone_from_this_host(holder: dict[str, Any]) -> bool:
    """Whether a lease's holder (``{"host": ..., "pid": ...}``) was a process on this host
    that no longer runs (killed, crashed): its lease need not be waited out."""
    if holder.get("host") != host_name() or not isinstance(holder.get("pid"), int):
        return False
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


def stop_server(process: subprocess.Popen[bytes], timeout_s: float = 30,
                stop_signal: int = signal.SIGTERM) -> int:
    """Stop a server process: ``stop_signal`` (SIGTERM: its clean shutdown), SIGKILL after
    ``timeout_s``; returns its exit code (negative: the signal that ended it)."""
    process.send_signal(stop_signal)
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    return process.returncode
