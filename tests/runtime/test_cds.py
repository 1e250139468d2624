"""The Spark driver's class-data-sharing archive (python_ingest/runtime/cds.py): named by its
class path and JVM, used when present, and usable by the driver that names it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from python_ingest.runtime import cds


def test_the_archive_belongs_to_one_class_path(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    jars = [tmp_path / "a.jar", tmp_path / "b.jar"]
    monkeypatch.setattr("python_ingest.runtime.jars.spark_jars", lambda: jars)
    first = cds.archive_path()
    assert first is not None and first.parent == tmp_path and first.suffix == ".jsa"
    monkeypatch.setattr("python_ingest.runtime.jars.spark_jars", lambda: [*jars, jars[0]])
    assert cds.archive_path() not in (None, first)  # another class path: another archive
    monkeypatch.setattr("python_ingest.runtime.jars.spark_jars", lambda: jars)
    training = tmp_path / "cds_train.py"
    training.write_text(cds.TRAINING.read_text() + "\n# trained on more\n")
    monkeypatch.setattr(cds, "TRAINING", training)
    assert cds.archive_path() not in (None, first)  # another training: another archive
    monkeypatch.undo()
    # a jar written again (a new .venv, jars resolved again): the JVM would refuse the old one
    monkeypatch.setattr("python_ingest.runtime.jars.spark_jars", lambda: jars)
    jars[0].write_bytes(b"jar")
    written = cds.archive_path()
    os.utime(jars[0], (1_000_000_000, 1_000_000_000))
    assert cds.archive_path() not in (None, written, first)
    jars[0].unlink()
    assert cds.archive_path() == first

    # absent: the driver starts as before; present: named, its failures kept quiet
    monkeypatch.setattr("python_ingest.runtime.jars.spark_jars", lambda: jars)
    monkeypatch.delenv(cds.CDS_ENV, raising=False)
    assert cds.java_options() == ""
    first.write_bytes(b"")
    assert cds.java_options().split() == [f"-XX:SharedArchiveFile={first}",
                                          "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]
    monkeypatch.setenv(cds.CDS_ENV, "off")
    assert cds.java_options() == ""


def test_no_class_path_means_no_archive(monkeypatch: pytest.MonkeyPatch) -> None:
    from python_ingest.exceptions import SetupError

    def unresolved() -> list[Path]:
        raise SetupError("not resolved")

    monkeypatch.setattr("python_ingest.runtime.jars.spark_jars", unresolved)
    assert cds.archive_path() is None and cds.java_options() == ""


@pytest.mark.e2e
def test_the_sessions_driver_maps_the_archive_make_setup_built(spark: Any) -> None:
    """`make setup` built the archive; the test session's driver was started with it, and a
    JVM on the driver's class path maps it (-Xshare:on fails when it cannot)."""
    archive = cds.archive_path()
    assert archive is not None and archive.exists(), "make setup builds it"
    jvm = spark._jvm
    arguments = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
                     .getInputArguments())
    assert f"-XX:SharedArchiveFile={archive}" in arguments
    java = Path(str(jvm.java.lang.System.getProperty("java.home"))) / "bin" / "java"
    classpath = str(jvm.java.lang.System.getProperty("java.class.path"))
    mapped = subprocess.run([str(java), "-Xshare:on", f"-XX:SharedArchiveFile={archive}",
                             "-cp", classpath, "-version"], capture_output=True, text=True,
                            timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert mapped.returncode == 0, mapped.stdout + mapped.stderr
    assert "sharing" in mapped.stderr
