"""Debezium's embedded engine with its MariaDB connector: what ``make bench-tap`` compares
``sluice tap`` with.

``jvm/debezium-embedded/pom.xml`` pins ``io.debezium:debezium-embedded`` and
``debezium-connector-mariadb``; ``jvm/debezium-embedded/src/sluice/bench/EmbeddedCapture.java``
is a small main class that runs the engine and writes its change events to a file as JSON.
``build`` (``python -m python_ingest.runtime.embedded build``, run by ``make bench-tap``)
copies the jars and their runtime closure with Maven from Maven Central and compiles the class
with javac into ``<jars home>/debezium-embedded-<sha256 of the pom and the source, 12 hex>/``,
atomically (``publish.publish_folder``), once. ``command`` is the ``java`` command line that
runs it. Nothing is fetched at run time.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from python_ingest.exceptions import SetupError
from python_ingest.runtime.jars import (
    CLASSPATH_FILE,
    DEPENDENCY_PLUGIN,
    MVN_TIMEOUT_S,
    hashed_dir,
    print_or_fail,
    repo_root,
    tools,
)
from python_ingest.runtime.publish import publish_folder

POM = Path("jvm") / "debezium-embedded" / "pom.xml"
SOURCE = Path("jvm") / "debezium-embedded" / "src" / "sluice" / "bench" / "EmbeddedCapture.java"
MAIN = "sluice.bench.EmbeddedCapture"
CLASSES = "classes"
JAVAC_TIMEOUT_S = 300


def folder(home: Path | None = None, root: Path | None = None) -> Path:
    """Where the jars and the compiled class live (built or not)."""
    root = root or repo_root()
    return hashed_dir(home, "debezium-embedded", root / POM, root / SOURCE)


def _complete(where: Path) -> bool:
    return (where / CLASSPATH_FILE).is_file() and \
        (where / CLASSES / "sluice" / "bench" / "EmbeddedCapture.class").is_file()


def _run(command: list[str], what: str, timeout_s: float) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False,
                          timeout=timeout_s)
    if done.returncode != 0:
        errors = [line for line in (done.stdout + done.stderr).splitlines()
                  if line.startswith("[ERROR]") or "error" in line.lower()][:6]
        raise SetupError(f"{what} failed (exit {done.returncode}):\n" + "\n".join(errors) +
                         "\nCheck network access to https://repo.maven.apache.org and that a "
                         "JDK 17 (javac) is installed, then run 'make bench-tap' again.")


def build(home: Path | None = None, root: Path | None = None) -> Path:
    """Resolve the jars and compile the main class once; returns their folder."""
    root = root or repo_root()
    final = folder(home, root)
    if _complete(final):
        return final
    mvn, javac = tools("mvn", "javac", missing="Maven (mvn) and a JDK (javac) are needed to "
                       "build Debezium's embedded engine for the bench: run 'make setup'")

    def fill(tmp: Path) -> None:
        _run([mvn, "-B", "-q", "-Dstyle.color=never", "-f", str(root / POM),
              f"{DEPENDENCY_PLUGIN}:copy-dependencies", f"-DoutputDirectory={tmp}",
              "-DincludeScope=runtime"], f"Maven resolving {root / POM}", MVN_TIMEOUT_S)
        jars = sorted(p.name for p in tmp.glob("*.jar"))
        if not jars:
            raise SetupError(f"Maven copied no jar from {root / POM}")
        _run([javac, "--release", "17", "-nowarn", "-cp",
              ":".join(str(tmp / name) for name in jars), "-d", str(tmp / CLASSES),
              str(root / SOURCE)], f"javac {SOURCE}", JAVAC_TIMEOUT_S)
        (tmp / CLASSPATH_FILE).write_text("".join(f"{name}\n" for name in jars))

    publish_folder(final, fill, _complete, stale=".debezium-embedded-*.tmp*")
    return final


def command(heap: str = "1g", home: Path | None = None) -> list[str]:
    """``java ... EmbeddedCapture`` (its arguments follow: see the class); SetupError when
    ``build`` has not run."""
    where = folder(home)
    if not _complete(where):
        raise SetupError(f"Debezium's embedded engine is not built in {where}: run "
                         "'make bench-tap' (python -m python_ingest.runtime.embedded build)")
    jars = [where / line for line in (where / CLASSPATH_FILE).read_text().split() if line]
    java = shutil.which("java") or "java"
    return [java, f"-Xmx{heap}", "-cp", ":".join(str(p) for p in [where / CLASSES, *jars]),
            MAIN]


def main(argv: list[str]) -> int:
    """``build``: resolve and compile unless done; prints the folder."""
    if argv != ["build"]:
        print("usage: python -m python_ingest.runtime.embedded build", file=sys.stderr)
        return 2
    return print_or_fail(lambda: [build()])


if __name__ == "__main__":  # used by `make bench-tap`
    sys.exit(main(sys.argv[1:]))
