"""A class-data-sharing archive for sluice's Spark driver: a faster JVM start.

A sluice process spends seconds of every start loading and verifying the same ~20,000
classes (Spark, Hudi, Iceberg, Kafka). A dynamic CDS archive (JDK 13+,
``-XX:ArchiveClassesAtExit``) keeps them parsed and verified in one file the JVM maps at
start: a Spark session starts in about half the time. ``make setup`` builds it once per
machine (``python -m python_ingest.runtime.cds build``) with a short training run
(cds_train.py) of the work sluice does (Hudi and Iceberg tables written, merged and read),
and ``spark_conf`` names it in ``spark.driver.extraJavaOptions`` when it exists.

The archive belongs to one class path and one JVM: its file name carries a hash of the
driver's class path (``localfs.driver_classpath``) and of pyspark's jars, each with its size
and time (the JVM refuses an archive, silently, when a jar was written again: a new .venv),
pyspark's version, the ``java`` binary and cds_train.py, so new jars, a new JDK or a changed
training look for a new archive, and without one the driver starts as it always did. A JVM
that cannot use an archive (changed jar files) falls back silently to its own classes.
``SLUICE_CDS=off`` turns it off.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CDS_ENV = "SLUICE_CDS"
TRAIN_ENV = "SLUICE_CDS_TRAIN"  # set in the training process (cds_train.py): the archive to write
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
TRAIN_TIMEOUT_S = 900
TRAINING = Path(__file__).with_name("cds_train.py")  # the training run's code


def _java() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else None
    if found is None or not found.exists():
        which = shutil.which("java")
        found = Path(which) if which else None
    return found.resolve() if found else None


def _stamp(path: Path) -> str:
    """A file's path, size and modification time (nothing more for a missing file)."""
    try:
        stat = path.stat()
    except OSError:
        return str(path)
    return f"{path} {stat.st_size} {int(stat.st_mtime)}"


def archive_path(classpath: list[Path] | None = None) -> Path | None:
    """Where the archive for the driver's class path (``classpath``, else worked out here)
    and this JVM lives (whether it exists or not), or None when there is no resolved Spark
    class path or no ``java``."""
    import pyspark

    from python_ingest.runtime.localfs import driver_classpath

    java = _java()
    try:
        jars = driver_classpath() if classpath is None else classpath
    except Exception:  # not resolved yet: `make setup` says how
        return None
    if java is None or not jars:
        return None
    # (and the training run's own code: a changed training makes a new archive at set-up)
    trained = hashlib.sha256(TRAINING.read_bytes()).hexdigest() if TRAINING.exists() else ""
    # every jar the driver's JVM opens, as the JVM checks them (size and time): jars written
    # again (a new .venv, jars resolved again) make the JVM refuse the archive silently
    spark_jars = sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    key = "\n".join([_stamp(java), pyspark.__version__, sys.prefix, trained,
                     *(_stamp(j) for j in [*jars, *spark_jars])])
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return jars[0].parent / f"driver-{digest}.jsa"


def java_options(classpath: list[Path] | None = None) -> str:
    """The driver's JVM options for the archive of its class path (``classpath``, else worked
    out here): use it if it exists (or write it, in the training process); empty when off or
    absent."""
    training = os.environ.get(TRAIN_ENV)
    if training:
        return f"-XX:ArchiveClassesAtExit={training} {_QUIET}"
    if os.environ.get(CDS_ENV, "on").lower() in ("off", "0", "false", "no"):
        return ""
    path = archive_path(classpath)
    if path is None or not path.exists():
        return ""
    return f"-XX:SharedArchiveFile={path} {_QUIET}"


def build(force: bool = False) -> Path | None:
    """Write the archive for this class path and JVM (a training run of about a minute),
    unless it exists. The file appears whole (written under a temporary name, then renamed)."""
    path = archive_path()
    if path is None:
        print("sluice: no Spark class path or no java: run `make setup` first", file=sys.stderr)
        return None
    if path.exists() and not force:
        print(f"class-data-sharing archive: {path} (exists)")
        return path
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sluice-cds-") as tmp:
        partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        env = {**os.environ, TRAIN_ENV: str(partial)}
        env.pop("JAVA_TOOL_OPTIONS", None)
        done = subprocess.run([sys.executable, "-m", "python_ingest.runtime.cds_train", tmp],
                              env=env, capture_output=True, text=True, timeout=TRAIN_TIMEOUT_S)
        if done.returncode != 0 or not partial.exists():
            partial.unlink(missing_ok=True)
            print(f"sluice: the class-data-sharing training run failed (exit {done.returncode});"
                  f" Spark starts without the archive. Its last output:\n{done.stderr[-3000:]}",
                  file=sys.stderr)
            return None
        partial.rename(path)
    for stale in path.parent.glob("driver-*.jsa"):  # another JDK's or pyspark's: never read
        if stale != path:
            stale.unlink(missing_ok=True)
    print(f"class-data-sharing archive: {path} ({path.stat().st_size >> 20} MB, "
          f"{time.monotonic() - started:.0f} s)")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m python_ingest.runtime.cds",
        description="Build the class-data-sharing archive that makes sluice's Spark driver "
                    f"start faster (used when present; {CDS_ENV}=off turns it off).")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="write the archive for this class path and JVM")
    b.add_argument("--force", action="store_true", help="write it again even if it exists")
    sub.add_parser("path", help="print where the archive for this class path and JVM lives")
    args = parser.parse_args(argv)
    if args.command == "path":
        print(archive_path() or "")
        return 0
    return 0 if build(args.force) is not None else 1


if __name__ == "__main__":
    sys.exit(main())
