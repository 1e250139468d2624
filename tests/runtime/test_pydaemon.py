"""PySpark's worker daemon as sluice starts it (runtime/pydaemon.py): the installed pyspark, not
Spark's zip of it; a zip archive's directory read again only once the archive changed; the
worker modules imported and frozen before the workers fork; and the tests' own Spark runs its
Python tasks in such workers."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from python_ingest.runtime import pydaemon
from tests.conftest import REPO

_ZIP_CHECK = """
import importlib, json, sys, zipfile
from python_ingest.runtime.pydaemon import keep_zip_directories
archive = sys.argv[1]
kept = keep_zip_directories()
sys.path.insert(0, archive)
import first
importer = sys.path_importer_cache[archive]
importlib.invalidate_caches()  # what pyspark's worker does before every task: the first reads
files = importer._files
importlib.invalidate_caches()  # the archive did not change: its directory is kept
unchanged = importer._files is files
with zipfile.ZipFile(archive, "a") as z:  # the archive changes: read again
    z.writestr("second.py", "VALUE = 2\\n")
importlib.invalidate_caches()
import second
print(json.dumps({"kept": kept, "unchanged": unchanged, "reread": importer._files is not files,
                  "values": [first.VALUE, second.VALUE]}))
"""


def test_a_zip_directory_is_read_again_only_once_its_archive_changed(tmp_path: Path) -> None:
    archive = tmp_path / "modules.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("first.py", "VALUE = 1\n")
    done = subprocess.run([sys.executable, "-c", _ZIP_CHECK, str(archive)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["values"] == [1, 2]
    if sys.version_info >= (3, 12):  # Python does it itself: nothing patched
        assert seen["kept"] is False
    else:
        assert seen == {"kept": True, "unchanged": True, "reread": True, "values": [1, 2]}


def test_the_daemon_imports_the_installed_pyspark_and_preloads_and_freezes_the_worker_modules(
        ) -> None:
    import pyspark

    installed = Path(pyspark.__file__).parent
    spark_zips = sorted((installed / "python" / "lib").glob("*.zip"))  # what Spark puts first
    assert [z.name for z in spark_zips][-1] == "pyspark.zip"
    check = ("import gc, json, sys\nfrom python_ingest.runtime.pydaemon import PRELOAD, "
             "drop_installed_pyspark_zip, preload\ndropped = drop_installed_pyspark_zip()\n"
             "failed = preload()\nimport pyspark.worker\nprint(json.dumps({'failed': failed, "
             "'frozen': gc.get_freeze_count(), 'dropped': dropped, 'worker': "
             "pyspark.worker.__file__, 'loaded': [m for m in PRELOAD if m in sys.modules]}))")
    done = subprocess.run([sys.executable, "-c", check], cwd=REPO, capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": ":".join(map(str, spark_zips))})
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    # the zip of the installed package is off the path: its modules come from the package
    assert seen["dropped"] == [str(installed / "python" / "lib" / "pyspark.zip")]
    assert seen["worker"] == str(installed / "worker.py")
    assert seen["failed"] == [] and seen["loaded"] == list(pydaemon.PRELOAD)
    assert seen["frozen"] > 50_000  # pyarrow, kafka-python, fastavro, the reader: all frozen
    # a module that is not there is reported, not raised
    assert pydaemon.preload(("no_such_module_for_sluice",)) == ["no_such_module_for_sluice"]
    gc.unfreeze()


def _in_worker(_: Any) -> Any:
    import gc
    import os
    import zipimport

    with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
        daemon = f.read().replace(b"\0", b" ").decode()
    import pyspark

    yield (daemon, bool(getattr(zipimport.zipimporter, "_sluice_kept", False)),
           gc.get_freeze_count(), "python_ingest.sources.kafka.reader" in __import__("sys").modules,
           pyspark.__file__)


@pytest.mark.e2e
def test_the_sessions_python_tasks_run_in_workers_of_sluices_daemon(spark: Any) -> None:
    assert spark.sparkContext.getConf().get("spark.python.daemon.module") == pydaemon.MODULE
    rows = spark.sparkContext.parallelize(range(2), 2).mapPartitions(_in_worker).collect()
    assert len(rows) == 2
    import pyspark

    for daemon, kept, frozen, reader, package in rows:
        assert f"-m {pydaemon.MODULE}" in daemon, daemon
        assert kept is (sys.version_info < (3, 12))
        assert frozen > 50_000 and reader
        assert package == pyspark.__file__  # the installed package, not Spark's zip
