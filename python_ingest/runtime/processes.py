"""Processes sluice starts or waits on: the host name it records, whether a lease's holder died
on this host, a free port for and the stop of a private server (MariaDB for the tap's tests and
demo, PostgreSQL for dispersal, a Spark standalone cluster)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from typing import Any

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
