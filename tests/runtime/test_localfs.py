"""The local file system local Spark uses: Hadoop's, with permissions through java.nio instead
of a chmod process per file; built by javac at set-up, atomically, named by its source."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from python_ingest.exceptions import SetupError
from python_ingest.runtime import localfs
from python_ingest.runtime.localfs import driver_classpath
from python_ingest.runtime.session import spark_conf


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.e2e
def test_setup_built_it_and_the_tests_session_writes_through_it(spark: Any,
                                                                 tmp_path: Path) -> None:
    jar = localfs.built_jar()
    assert jar is not None, "make setup did not build the local file system jar"
    assert jar.parent.name.startswith("localfs-") and driver_classpath()[-1] == jar
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    assert conf.get("fs.file.impl") == localfs.FS_CLASS
    fs = jvm.org.apache.hadoop.fs.FileSystem.getLocal(conf)
    assert fs.getClass().getName() == localfs.FS_CLASS
    assert fs.getRawFileSystem().getClass().getName() == f"{localfs.FS_CLASS}$Raw"

    permission = jvm.org.apache.hadoop.fs.permission.FsPermission.createImmutable

    def hadoop(path: Path) -> Any:
        return jvm.org.apache.hadoop.fs.Path(path.as_uri())

    # folders and files get exactly the mode asked for 
    folder = tmp_path / "a" / "b"
    assert fs.mkdirs(hadoop(folder), permission(0o750))
    assert _mode(folder) == 0o750
    fs.create(hadoop(folder / "f")).close()  # Hadoop's default file mode, 0666, umask 022
    assert (folder / "f").is_file() and _mode(folder / "f") == 0o644
    for mode in (0o600, 0o644, 0o755, 0o000, 0o777):
        fs.setPermission(hadoop(folder / "f"), permission(mode))
        assert _mode(folder / "f") == mode
    # the sticky bit, which java.nio cannot set, still goes through chmod
    fs.setPermission(hadoop(folder), permission(0o1777))
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o1777
    # a missing file: an error naming it, as Hadoop's own raises one
    with pytest.raises(Exception, match="nope"):
        fs.setPermission(hadoop(folder / "nope"), permission(0o640))
    # and Spark's own writes go through it: their files read back
    out = tmp_path / "parquet"
    spark.range(100).repartition(3).write.parquet(str(out))
    assert spark.read.parquet(str(out)).count() == 100
    assert len(list(out.glob("part-*.parquet"))) == 3


def test_only_a_local_master_uses_it_and_sluices_worker_daemon(base_settings: Any) -> None:
    local = spark_conf(base_settings)
    assert local["spark.hadoop.fs.file.impl"] == localfs.FS_CLASS
    assert local["spark.driver.extraClassPath"].endswith(str(localfs.built_jar()))
    cluster = spark_conf(dataclasses.replace(base_settings, spark=dataclasses.replace(
        base_settings.spark, master="spark://localhost:7077")))
    assert "spark.hadoop.fs.file.impl" not in cluster
    # and pyspark's own worker daemon (runtime/pydaemon.py: the executors' Python may not
    # import python_ingest before a task)
    assert local["spark.python.daemon.module"] == "python_ingest.runtime.pydaemon"
    assert "spark.python.daemon.module" not in cluster
    # the driver's class path is the same (the class-data-sharing archive fits both)
    assert cluster["spark.driver.extraClassPath"] == local["spark.driver.extraClassPath"]
    # a user's own setting wins
    own = spark_conf(dataclasses.replace(base_settings, spark=dataclasses.replace(
        base_settings.spark, conf={"spark.hadoop.fs.file.impl":
                                   "org.apache.hadoop.fs.LocalFileSystem"})))
    assert own["spark.hadoop.fs.file.impl"] == "org.apache.hadoop.fs.LocalFileSystem"


def test_build_compiles_once_into_a_folder_named_by_its_source(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_JARS_DIR", str(tmp_path))
    jar = localfs.build()
    assert jar == localfs.jar_path() == localfs.built_jar()
    assert jar.parent.parent == tmp_path.resolve()
    assert [p.name for p in tmp_path.iterdir()] == [jar.parent.name]  # no temporary left
    assert [p.name for p in jar.parent.iterdir()] == [localfs.JAR_NAME]
    assert _mode(jar.parent) == 0o755  # readable by every user of the project, as the jars
    built = jar.stat().st_mtime_ns
    assert localfs.build() == jar and jar.stat().st_mtime_ns == built  # once
    assert localfs.main(["path"]) == 0


def test_build_without_a_compiler_says_what_to_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SLUICE_JARS_DIR", str(tmp_path))
    monkeypatch.setattr(localfs.shutil, "which", lambda name: None)
    with pytest.raises(SetupError, match="openjdk-17-jdk-headless"):
        localfs.build()
    assert localfs.main(["build"]) == 1
    assert "javac and jar are not installed" in capsys.readouterr().err
    assert localfs.main(["path"]) == 1  # nothing built here
    assert list(tmp_path.iterdir()) == []
