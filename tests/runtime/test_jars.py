"""The pinned JVM jars: resolved from the repository's poms with real Maven, once, atomically."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from python_ingest.exceptions import SetupError
from python_ingest.runtime import jars
from python_ingest.runtime.catalog import INSERT_OPERATION

REPO = Path(__file__).resolve().parent.parent.parent


def _resolve_in_subprocess(state_dir: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "python_ingest.runtime.jars", "resolve",
                             str(state_dir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=REPO)


def test_two_concurrent_resolves_both_succeed_into_one_folder(tmp_path: Path) -> None:
    state = tmp_path / "state"
    runs = [_resolve_in_subprocess(state) for _ in range(2)]
    results = [run.communicate(timeout=600) for run in runs]
    for run, (_, err) in zip(runs, results, strict=True):
        assert run.returncode == 0, err
    assert results[0][0] == results[1][0]
    folders = [Path(line) for line in results[0][0].splitlines()]
    assert [f.name.split("-")[0] for f in folders] == list(jars.USES)
    assert all(re.fullmatch(r"[a-z]+-[0-9a-f]{12}", f.name) for f in folders)
    # no temporary folder is left behind by the process that lost the rename
    assert sorted(p for p in state.iterdir() if not p.is_symlink()) == sorted(folders)

    spark = jars.classpath(state, "spark", REPO)
    pinned = jars.pinned(jars.pom_path(REPO, "spark"))
    expected = {f"{coord.split(':')[1]}-{coord.split(':')[2]}.jar" for coord in pinned}
    assert {jar.name for jar in spark} == expected  # the bundles alone, nothing transitive
    assert all(jar.is_absolute() and jar.parent == folders[0] for jar in spark)

    kafka = {jar.name for jar in jars.classpath(state, "kafka", REPO)}
    assert any(re.fullmatch(r"kafka_2\.13-4\.[\d.]+\.jar", name) for name in kafka)
    assert {"kafka-clients", "kafka-server", "scala-library", "log4j-core",
            "log4j-slf4j-impl"} <= {name.rsplit("-", 1)[0] for name in kafka}


def test_classpath_without_resolve_says_run_make_setup(tmp_path: Path) -> None:
    with pytest.raises(SetupError, match="run 'make setup'"):
        jars.classpath(tmp_path, "spark", REPO)
    with pytest.raises(SetupError, match="run 'make setup'"):
        jars.spark_jars(tmp_path / "nothing")


def test_an_incomplete_folder_is_not_used_and_resolve_repairs_it(tmp_path: Path) -> None:
    folder = jars.resolve(tmp_path, REPO, "kafka")
    assert jars.resolve(tmp_path, REPO, "kafka") == folder  # complete: nothing to do
    removed = next(folder.glob("kafka-clients-*.jar"))
    removed.unlink()
    with pytest.raises(SetupError, match="make setup"):
        jars.classpath(tmp_path, "kafka", REPO)
    assert jars.resolve(tmp_path, REPO, "kafka") == folder
    assert removed in jars.classpath(tmp_path, "kafka", REPO)
    assert [p.name for p in tmp_path.iterdir() if not p.is_symlink()] == [folder.name]


def test_unresolvable_pom_names_the_pom_and_what_to_check(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    pom = tmp_path / "jvm" / "spark" / "pom.xml"
    pom.parent.mkdir(parents=True)
    original = jars.pom_path(REPO, "spark").read_text()
    pom.write_text(re.sub(r"<artifactId>postgresql</artifactId>",
                          "<artifactId>sluice-no-such-artifact</artifactId>", original))
    monkeypatch.setenv(jars.JVM_DIR_ENV, str(tmp_path / "jvm"))
    with pytest.raises(SetupError) as raised:
        jars.resolve(tmp_path / "state", REPO, "spark")
    message = str(raised.value)
    assert str(pom) in message
    assert "org.postgresql:sluice-no-such-artifact:" in message
    assert "Maven Central" in message and "settings.xml" in message
    assert not any((tmp_path / "state").iterdir())  # nothing half-done remains

    result = subprocess.run([sys.executable, "-m", "python_ingest.runtime.jars", "resolve",
                             str(tmp_path / "state")], capture_output=True, text=True,
                            env={**os.environ, jars.JVM_DIR_ENV: str(tmp_path / "jvm")})
    assert result.returncode == 2
    assert "sluice-no-such-artifact" in result.stderr


def test_the_dbt_profile_names_the_pinned_spark_jars() -> None:
    """Plain `dbt run` uses profiles.yml's default spark.jars: the same jars as the pom."""
    profile = (REPO / "profiles.yml").read_text()
    default = re.search(r"env_var\('SLUICE_SPARK_JARS', '([^']+)'\)", profile)
    assert default is not None
    listed = [Path(p).name for p in default.group(1).split(",")]
    assert all(p.startswith(".sluice/jars/spark/") for p in default.group(1).split(","))
    resolved = [j.name for j in jars.spark_jars()]
    assert sorted(listed) == sorted(resolved)
    assert f"spark.driver.extraClassPath: \"{{{{ env_var('SLUICE_SPARK_JARS', " \
        f"'{default.group(1)}') | replace(',', ':') }}}}\"" in profile


def test_the_dbt_profile_writes_hudi_as_sluice_does(tmp_path: Path) -> None:
    """dbt-spark's session cursor applies the profile's server_side_parameters to the session
    on every statement, so its Hudi write settings become those of every later write of that
    session (runner, `sluice run` and a plain `dbt run` alike): they must be sluice's own,
    single writer with eager rollback and no lock provider (docs/formats.md)."""
    import yaml

    from python_ingest.config import load_settings
    from python_ingest.runtime.session import spark_conf

    profile = yaml.safe_load((REPO / "profiles.yml").read_text())
    params = profile["sluice"]["outputs"]["embedded"]["server_side_parameters"]
    (tmp_path / "sluice.yml").write_text("jobs: {}\n")
    ours = spark_conf(load_settings(tmp_path / "sluice.yml", env={}))
    # but the SQL insert operation: sluice's sessions bulk insert, and a bucket lake's merge
    # sets upsert around its insert (the lake_merge materialization), which a profile
    # setting applied before every statement would undo
    assert INSERT_OPERATION not in params
    assert {k: str(v) for k, v in params.items() if k.startswith("hoodie.")} == \
        {k: v for k, v in ours.items() if k.startswith("hoodie.") and k != INSERT_OPERATION}
    assert "hoodie.write.lock.provider" not in params
