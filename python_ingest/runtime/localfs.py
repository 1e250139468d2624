"""Hadoop's local file system without a ``chmod`` process per file, for local Spark.

Without Hadoop's native library (no published artifact carries ``libhadoop.so``), Hadoop's
``RawLocalFileSystem`` sets the permissions of every file and folder it creates by running
``chmod`` in a child process: each data file of a Spark write, its ``.crc`` file, every commit
marker and every Hudi timeline file. That costs the driver about 3 ms of CPU per file (a loop
of 1,000 ``setPermission`` calls through py4j: 3.3 ms each, 0.2 ms through java.nio), and
sluice's own test suite forked ``chmod`` some 27,000 times from its two Spark drivers alone.

``jvm/localfs/src/sluice/hadoop/NioLocalFileSystem.java`` is Hadoop's ``LocalFileSystem``
with ``setPermission`` through java.nio (the same modes; the sticky, setuid and setgid bits
still go through ``chmod``). ``make setup`` compiles it (``python -m python_ingest.runtime.localfs
build``: javac, against the Hadoop API jar pyspark ships) into
``<jars home>/localfs-<hash of the source and that jar>/sluice-localfs.jar``, atomically. A
session with a local master puts it on the driver's class path and sets ``fs.file.impl`` to it
(``session.spark_conf``); a cluster's executors, which may lack the jar, keep Hadoop's own.
Without the jar (no ``javac``, or set-up not run) Spark uses Hadoop's own, as before.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from python_ingest.exceptions import SetupError
from python_ingest.runtime.publish import publish_folder

FS_CLASS = "sluice.hadoop.NioLocalFileSystem"
JAR_NAME = "sluice-localfs.jar"
SOURCE = Path("jvm/localfs/src/sluice/hadoop/NioLocalFileSystem.java")
JAVAC_TIMEOUT_S = 300


def hadoop_api_jar() -> Path | None:
    """The Hadoop client API jar pyspark runs with (what the class is compiled against)."""
    import pyspark

    found = sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    return found[-1] if found else None


def jar_path() -> Path | None:
    """Where the jar for this source and this Hadoop lives (built or not); None without the
    source or without pyspark's Hadoop jar."""
    from python_ingest.runtime.jars import jars_home, repo_root

    source, api = repo_root() / SOURCE, hadoop_api_jar()
    if not source.is_file() or api is None:
        return None
    digest = hashlib.sha256(source.read_bytes() + api.name.encode()).hexdigest()[:12]
    return jars_home().resolve() / f"localfs-{digest}" / JAR_NAME


def built_jar() -> Path | None:
    """The jar, if set-up built it."""
    path = jar_path()
    return path if path is not None and path.is_file() else None


def driver_classpath(spark_jars: list[Path] | None = None) -> list[Path]:
    """The Spark driver's own class path: the Spark jars (``spark_jars``, else resolved
    here), then this file system's jar when set-up built it (always there, local master or
    not: the class-data-sharing archive fits every driver)."""
    if spark_jars is None:
        from python_ingest.runtime.jars import spark_jars as resolved

        spark_jars = resolved()
    localfs = built_jar()
    return [*spark_jars, *([localfs] if localfs else [])]


def build() -> Path:
    """Compile the file system into its jar unless it exists; the folder appears whole."""
    path = jar_path()
    if path is None:
        raise SetupError(f"cannot build the local file system: {SOURCE} or pyspark's Hadoop "
                         "jar is missing (run 'make setup' in a full checkout)")
    if path.is_file():
        return path
    from python_ingest.runtime.jars import repo_root, tools

    javac, jar = tools("javac", "jar", missing="javac and jar are not installed: install a JDK "
                       "(Debian: apt-get install openjdk-17-jdk-headless), or run 'make setup'")

    def fill(tmp: Path) -> None:
        classes = tmp / "classes"
        for command in ([javac, "--release", "8", "-nowarn", "-cp", str(hadoop_api_jar()),
                         "-d", str(classes), str(repo_root() / SOURCE)],
                        [jar, "cf", str(tmp / JAR_NAME), "-C", str(classes), "."]):
            done = subprocess.run(command, capture_output=True, text=True,
                                  timeout=JAVAC_TIMEOUT_S, check=False)
            if done.returncode != 0:
                raise SetupError(f"{Path(command[0]).name} failed (exit {done.returncode}): "
                                 f"{(done.stderr or done.stdout).strip()[-2000:]}")
        shutil.rmtree(classes)

    publish_folder(path.parent, fill, lambda folder: (folder / JAR_NAME).is_file())
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m python_ingest.runtime.localfs",
        description="Build the local file system local Spark sessions use: Hadoop's, with "
                    "permissions set through java.nio instead of a chmod process per file.")
    parser.add_argument("command", choices=["build", "path"],
                        help="build: compile the jar unless it exists; path: print where it is")
    args = parser.parse_args(argv)
    try:
        if args.command == "path":
            path = built_jar()
            if path is None:
                print("sluice: the local file system jar is not built: run 'make setup'",
                      file=sys.stderr)
                return 1
            print(path)
            return 0
        print(f"local file system: {build()}")
        return 0
    except SetupError as exc:
        print(f"sluice: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
