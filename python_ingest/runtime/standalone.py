"""A Spark standalone cluster on this machine, from pyspark's own ``spark-class``: a master and
N workers on 127.0.0.1, each in its own process group with its own work folder, stopped (or
one worker killed) on demand. For the cluster tests and ``bench/cluster_bench.py``; a real
cluster is started by its operator (docs/deploy.md).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from python_ingest.exceptions import SetupError
from python_ingest.runtime.processes import free_port, stop_server

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_class() -> Path:
    """pyspark's ``bin/spark-class`` (pyspark is a full Spark distribution's jars)."""
    import pyspark

    path = Path(pyspark.__file__).parent / "bin" / "spark-class"
    if not path.is_file():
        raise SetupError(f"pyspark has no {path}: reinstall it ('make setup')")
    return path



@dataclass
class LocalCluster:
    """``workers`` workers of ``cores`` cores and ``memory`` each, plus their master."""

    workers: int = 2
    cores: int = 1
    memory: str = "2g"
    folder: Path | None = None
    port: int = 0
    ui_port: int = 0
    master: subprocess.Popen[bytes] | None = None
    worker_processes: list[subprocess.Popen[bytes] | None] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        assert self.folder is not None
        log = open(self.folder / f"{name}.log", "wb")  # noqa: SIM115 (the daemon writes on)
        env = {**os.environ, "SPARK_HOME": str(spark_class().parent.parent),
               "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1",
               "SPARK_LOG_DIR": str(self.folder), "SPARK_PID_DIR": str(self.folder)}
        return subprocess.Popen([str(spark_class()), *args], stdout=log,
                                stderr=subprocess.STDOUT, env=env, cwd=self.folder,
                                start_new_session=True)  # a worker's executors die with it

    def start(self, timeout_s: float = 90) -> LocalCluster:
        self.folder = Path(tempfile.mkdtemp(prefix="sluice-spark-cluster-"))
        self.port, self.ui_port = free_port(), free_port()
        self.master = self._start("master", MASTER_CLASS, "--host", "127.0.0.1", "--port",
                                  str(self.port), "--webui-port", str(self.ui_port))
        for i in range(self.workers):
            work = self.folder / f"worker-{i}"
            work.mkdir()
            self.worker_processes.append(self._start(
                f"worker-{i}", WORKER_CLASS, "--host", "127.0.0.1", "--cores", str(self.cores),
                "--memory", self.memory, "--work-dir", str(work), "--webui-port",
                str(free_port()), self.url))
        deadline = time.monotonic() + timeout_s
        while self.alive_workers() < self.workers:
            if time.monotonic() > deadline or self.master.poll() is not None:
                logs = self.logs()
                self.stop()
                raise SetupError(f"the Spark standalone cluster did not come up within "
                                 f"{timeout_s:.0f}s:\n{logs}")
            time.sleep(0.5)
        return self

    def alive_workers(self) -> int:
        """Workers the master counts as ALIVE (its JSON status page)."""
        import json

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/",
                                        timeout=5) as page:
                status = json.load(page)
        except OSError:
            return 0
        return sum(1 for w in status.get("workers", []) if w.get("state") == "ALIVE")

    def kill_worker(self, index: int) -> None:
        """SIGKILL a worker and its executors (its process group), as a lost node."""
        process = self.worker_processes[index]
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        self.worker_processes[index] = None

    def worker_of_executor(self, executor_id: str) -> int | None:
        """Which worker (index) runs the executor ``executor_id`` (its JVM is the worker's
        child, started with ``--executor-id <id>``)."""
        for index, process in enumerate(self.worker_processes):
            if process is None or process.poll() is not None:
                continue
            children = subprocess.run(["pgrep", "-P", str(process.pid)], capture_output=True,
                                      text=True).stdout.split()
            for child in children:
                try:
                    args = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if b"--executor-id" in args and \
                        args[args.index(b"--executor-id") + 1].decode() == executor_id:
                    return index
        return None

    def logs(self, tail: int = 3000) -> str:
        if self.folder is None:
            return ""
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-tail:]}"
                         for p in sorted(self.folder.glob("*.log")))

    def stop(self) -> None:
        for i in range(len(self.worker_processes)):
            process = self.worker_processes[i]
            if process is not None:
                stop_server(process, 30)
                _kill_group(process)
            self.worker_processes[i] = None
        if self.master is not None:
            stop_server(self.master, 30)
            _kill_group(self.master)
            self.master = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """Whatever the daemon left in its group (an executor of a stopped worker)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
