"""PySpark's Python worker daemon, without the work it repeats for every task and every start.

Every Python task (the Kafka reader's ``mapInArrow``) starts with ``importlib.invalidate_caches()``
in pyspark's worker. On Python 3.11 and older, that makes each zip importer on ``sys.path`` read
its archive's whole directory again, in Python: the worker's ``sys.path`` starts with Spark's
``pyspark.zip`` (793 files) and py4j's zip, so every task paid for two directory reads before
its first row. py-spy on the workers of ``tests/steps/test_index.py``: 77 % of their samples
were in ``zipimporter.invalidate_caches``. Python 3.12 fixed it (gh-103200: the directory is
read again only once an archive changed).

Spark also puts its ``pyspark.zip`` first on the workers' path, and a zip holds no bytecode:
every daemon compiled pyspark's modules from their sources again. Where that zip is the one
pip's pyspark ships inside the installed package (``pyspark/python/lib``), it is the same code,
so the daemon takes it off ``sys.path`` and imports the installed package instead.

A reused worker also runs a full ``gc.collect()`` after every task, which walks every object
the worker holds: some 75,000 once pyarrow, kafka-python, fastavro and the reader are imported,
26 ms a collection. The daemon imports those modules itself (``PRELOAD``) and then freezes
everything it holds (``gc.freeze``) before it forks the workers: a worker's collection walks
only what it made itself, and a new worker imports nothing.

Spark starts this module instead of ``pyspark.daemon`` (``spark.python.daemon.module``, set by
``session.spark_conf``): it drops the installed package's zip, keeps each other archive's
directory until the archive's size, mtime or inode changes (as 3.12 does), preloads and
freezes, then runs pyspark's daemon, whose workers fork from it.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
import zipimport
from pathlib import Path
from typing import Any

MODULE = "python_ingest.runtime.pydaemon"
# what a worker imports for a task of the Kafka reader (mapInArrow); one that fails to import
# is left to the task, which says why
PRELOAD = ("pyspark.worker", "pyspark.sql.pandas.serializers", "pyarrow", "pyarrow.compute",
           "fastavro", "kafka", "kafka.errors", "confluent_kafka",
           "python_ingest.sources.kafka.reader")


def keep_zip_directories() -> bool:
    """Make ``zipimporter.invalidate_caches`` read an archive again only when it changed; False
    where Python does that already (3.12 and newer) and nothing was changed."""
    if sys.version_info >= (3, 12) or getattr(zipimport.zipimporter, "_sluice_kept", False):
        return False
    reread = zipimport.zipimporter.invalidate_caches
    read: dict[str, tuple[int, int, int] | None] = {}

    def invalidate_caches(self: Any) -> None:
        try:
            found = os.stat(self.archive)
            stamp: tuple[int, int, int] | None = (found.st_mtime_ns, found.st_size,
                                                  found.st_ino)
        except OSError:
            stamp = None
        if stamp is not None and read.get(self.archive) == stamp:
            return
        reread(self)
        read[self.archive] = stamp

    zipimport.zipimporter.invalidate_caches = invalidate_caches  # type: ignore[method-assign]
    zipimport.zipimporter._sluice_kept = True  # type: ignore[attr-defined]
    return True


def drop_installed_pyspark_zip() -> list[str]:
    """Take Spark's ``pyspark.zip`` off ``sys.path`` when it is the zip of the pyspark package
    installed beside it (pip's pyspark ships one under ``pyspark/python/lib``, and Spark puts it
    first on the workers' path): the same code, imported from the package's cached bytecode
    instead of compiled from the zip's sources in every daemon; the entries removed."""
    removed = []
    for entry in list(sys.path):
        archive = Path(entry)
        package = archive.parent.parent.parent  # <site>/pyspark/python/lib/pyspark.zip
        if (archive.name == "pyspark.zip" and archive.parent.name == "lib"
                and package.name == "pyspark" and (package / "__init__.py").is_file()
                and str(package.parent) in sys.path):
            sys.path.remove(entry)
            removed.append(entry)
    return removed


def preload(modules: tuple[str, ...] = PRELOAD) -> list[str]:
    """Import ``modules`` and freeze every object this process holds (``gc.freeze``: no
    collection walks them again); the modules that failed to import."""
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:
            failed.append(name)
    gc.collect()
    gc.freeze()
    return failed


if __name__ == "__main__":
    drop_installed_pyspark_zip()
    keep_zip_directories()
    preload()
    from pyspark.daemon import manager

    manager()
