"""The jars Spark needs for Iceberg, produced from PyPI packages only.

The Iceberg Spark runtime comes from the PyPI package snowpark-connect-deps-iceberg. That copy
lacks Iceberg's shaded Jackson, so we relocate pyspark's own Jackson jars into
``org.apache.iceberg.shaded.com.fasterxml.jackson`` with jarjar (Debian's libjarjar-java) once,
at set-up (``make jars``), and cache the result under ``.sluice/jars``.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from python_ingest.exceptions import SetupError

ICEBERG_JAR = "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
SHADED_JACKSON_JAR = "iceberg-shaded-jackson-2.15.2.jar"
JACKSON_JARS = ("jackson-core", "jackson-databind", "jackson-annotations")
JARJAR_CANDIDATES = ("/usr/share/java/jarjar.jar", "/usr/share/java/jarjar-1.4.jar")
RELOCATION_RULE = ("rule com.fasterxml.jackson.** "
                   "org.apache.iceberg.shaded.com.fasterxml.jackson.@1\n")


def iceberg_runtime_jar() -> Path:
    """Path of the Iceberg Spark runtime jar shipped in the PyPI package."""
    try:
        import snowpark_connect_deps_iceberg as pkg
    except ImportError as exc:
        raise SetupError("the package snowpark-connect-deps-iceberg is missing: "
                         "run 'make setup'") from exc
    jar = Path(pkg.__file__).parent / "jars" / ICEBERG_JAR
    if not jar.is_file():
        raise SetupError(f"{jar} is missing from snowpark-connect-deps-iceberg: run 'make setup'")
    return jar


def _pyspark_jars_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def _jackson_sources() -> list[Path]:
    found = []
    jars_dir = _pyspark_jars_dir()
    for name in JACKSON_JARS:
        matches = sorted(jars_dir.glob(f"{name}-2*.jar"))
        if not matches:
            raise SetupError(f"pyspark ships no {name} jar in {jars_dir}")
        found.append(matches[-1])
    return found


def build_shaded_jackson(target_dir: Path) -> Path:
    """Relocate pyspark's Jackson jars for Iceberg; returns the jar (cached if present)."""
    target = target_dir / SHADED_JACKSON_JAR
    if target.is_file():
        return target
    jarjar = next((Path(p) for p in JARJAR_CANDIDATES if Path(p).is_file()), None)
    if jarjar is None:
        raise SetupError("jarjar is not installed: run 'make setup' (apt package libjarjar-java)")
    java = shutil.which("java")
    if java is None:
        raise SetupError("java is not installed: run 'make setup' "
                         "(apt package openjdk-17-jre-headless)")
    target_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        merged = Path(tmp) / "merged.jar"
        seen: set[str] = set()
        with zipfile.ZipFile(merged, "w", zipfile.ZIP_DEFLATED) as out:
            for source in _jackson_sources():
                with zipfile.ZipFile(source) as src:
                    for info in src.infolist():
                        name = info.filename
                        if (name in seen or name.endswith("module-info.class")
                                or name.startswith("META-INF/versions/")):
                            continue
                        seen.add(name)
                        out.writestr(info, src.read(name))
        rules = Path(tmp) / "rules.txt"
        rules.write_text(RELOCATION_RULE)
        partial = target.with_suffix(".partial")
        result = subprocess.run([java, "-jar", str(jarjar), "process", str(rules), str(merged),
                                 str(partial)], capture_output=True, text=True, check=False)
        if result.returncode != 0 or not partial.is_file():
            raise SetupError(f"jarjar failed to relocate Jackson: {result.stderr.strip()}")
        partial.replace(target)
    return target


def spark_jars(state_dir: Path) -> list[Path]:
    """All jars to put on spark.jars, building the relocated Jackson jar if needed."""
    return [iceberg_runtime_jar(), build_shaded_jackson(state_dir / "jars")]


if __name__ == "__main__":  # used by `make jars`
    import sys

    for jar in spark_jars(Path(sys.argv[1] if len(sys.argv) > 1 else ".sluice")):
        print(jar)
