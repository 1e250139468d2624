"""A private PostgreSQL cluster for tests and the dispersal benchmark: ``initdb`` into a
fresh folder, ``postgres`` on a free loopback port with its socket in that folder, stopped
at the end. Nothing of the machine's own PostgreSQL service is used.

PostgreSQL refuses to run as root; as root the cluster runs as the ``postgres`` user (made by
Debian's package), else ``nobody``.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from python_ingest.exceptions import SetupError
from python_ingest.runtime.processes import free_port, stop_server

USER = "sluice"


def find_bin() -> Path | None:
    """The newest PostgreSQL server's bin folder (Debian: /usr/lib/postgresql/<v>/bin)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name)
                   if Path(p).parent.parent.name.isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None



def _run_as() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise SetupError("PostgreSQL cannot run as root and there is no 'postgres' or 'nobody' "
                     "user to run it as")


def _as_user(user: pwd.struct_passwd | None) -> dict[str, Any]:
    """``subprocess`` arguments that start a program as ``user`` (None: as this process).

    Set by the child in C, never by a ``preexec_fn``: a child that runs Python after the fork
    first frees the objects of this process's other threads (``PyOS_AfterFork_Child``), and
    py4j's connection of its finalizer thread, freed there, shuts its socket down for the
    parent too: the next py4j call printed "Connection reset by peer" tracebacks (#34)."""
    if user is None:
        return {}
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


@dataclass
class LocalPostgres:
    """A private cluster in its own folder (under /tmp: the server's user must reach it)."""

    folder: Path | None = None
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    settings: tuple[str, ...] = ()  # more server settings, "name=value" (passed as -c)

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user={USER} dbname=postgres"

    def start(self, timeout_s: float = 60) -> LocalPostgres:
        bin_dir = find_bin()
        if bin_dir is None:
            raise SetupError("no PostgreSQL server binaries found: install them with "
                             "'apt-get install postgresql' (or 'make system-deps')")
        user = _run_as()
        self.folder = Path(tempfile.mkdtemp(prefix="sluice-pg-"))
        data = self.folder / "data"
        if user is not None:
            os.chown(self.folder, user.pw_uid, user.pw_gid)
        subprocess.run([str(bin_dir / "initdb"), "-D", str(data), "-U", USER, "-A", "trust",
                        "-E", "UTF8", "--no-sync"], check=True, capture_output=True,
                       cwd=self.folder, timeout=120, **_as_user(user))
        self.port = free_port()
        log = open(self.folder / "server.log", "wb")  # noqa: SIM115 (the server writes on)
        if user is not None:
            os.chown(self.folder / "server.log", user.pw_uid, user.pw_gid)
        self.process = subprocess.Popen(
            [str(bin_dir / "postgres"), "-D", str(data), "-p", str(self.port),
             "-k", str(self.folder), "-h", "127.0.0.1", "-c", "fsync=off",
             "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
             *(arg for setting in self.settings for arg in ("-c", setting))],
            stdout=log, stderr=log, cwd=self.folder, **_as_user(user))
        deadline = time.monotonic() + timeout_s
        import psycopg

        while True:
            try:
                psycopg.connect(self.dsn, connect_timeout=2).close()
                return self
            except psycopg.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    text = (self.folder / "server.log").read_text(errors="replace")[-2000:]
                    self.stop()
                    raise SetupError(f"private PostgreSQL did not start: {text}") from None
                time.sleep(0.2)

    def stop(self, timeout_s: float = 30) -> int | None:
        """Stop the server and remove its folder; returns its exit code (0: a clean shutdown,
        None: it was not running). SIGINT is PostgreSQL's fast shutdown: it ends the client
        sessions still open (SIGTERM's smart shutdown waits for them, here until it was
        killed after ``timeout_s``) and writes its shutdown checkpoint."""
        code = None
        if self.process is not None:
            code = stop_server(self.process, timeout_s, signal.SIGINT)
            self.process = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
        return code
