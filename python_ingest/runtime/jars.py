"""The pinned JVM parts: jars from Maven Central, resolved once at set-up, never at run time.

``jvm/<use>/pom.xml`` lists, with exact versions, the jars one use needs ("spark": what goes on
``spark.jars``; "kafka": the embedded broker's full classpath). ``make setup`` runs
``python -m python_ingest.runtime.jars resolve``, which copies them with Maven into
``<jars home>/<use>-<sha256 of the pom, 12 hex>/`` plus a ``classpath.txt`` listing them. The
jars home is the project's ``.sluice/jars`` (or ``$SLUICE_JARS_DIR``), whatever a config's
``state_dir`` says: jars belong to the installation, not to one pipeline's state.
The folder appears atomically (built under a temporary name, then renamed), so a half-finished
resolve is never mistaken for a finished one, and concurrent resolves both succeed. Changing a
pom changes its hash, so the next ``make setup`` resolves into a new folder.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from xml.etree import ElementTree

from python_ingest.exceptions import SetupError
from python_ingest.runtime.publish import publish_folder

USES = ("spark", "kafka")
CLASSPATH_FILE = "classpath.txt"
JVM_DIR_ENV = "SLUICE_JVM_DIR"
JARS_DIR_ENV = "SLUICE_JARS_DIR"
# Named in full (not ``dependency:``) so no plugin-prefix lookup needs the network.
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
MVN_TIMEOUT_S = 1800
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PROPERTY = re.compile(r"\$\{([^}]+)\}")
_HELP = re.compile(r"\s*-> \[Help \d+\]$")
_MVN_NOISE = ("-e switch", "-X switch", "full stack trace", "Re-run Maven", "For more information",
              "cwiki.apache.org")


def repo_root() -> Path:
    """The repository holding the ``python_ingest`` package (and, normally, ``jvm/``)."""
    return Path(__file__).resolve().parent.parent.parent


def jars_home() -> Path:
    """Where resolved jars live: ``$SLUICE_JARS_DIR`` or the repository's ``.sluice/jars``."""
    override = os.environ.get(JARS_DIR_ENV)
    return Path(override).expanduser() if override else repo_root() / ".sluice" / "jars"


def jvm_dir(root: Path) -> Path:
    """The folder with one ``<use>/pom.xml`` per use: ``$SLUICE_JVM_DIR`` or ``root/jvm``."""
    override = os.environ.get(JVM_DIR_ENV)
    return Path(override).expanduser() if override else root / "jvm"


def pom_path(root: Path, use: str) -> Path:
    """The pom pinning the jars of ``use``; raises SetupError if ``use`` or the pom is unknown."""
    if use not in USES:
        raise SetupError(f"unknown jar set {use!r}: expected one of {', '.join(USES)}")
    pom = jvm_dir(root) / use / "pom.xml"
    if not pom.is_file():
        raise SetupError(f"the JVM manifest {pom} is missing: restore jvm/{use}/pom.xml from the "
                         f"repository (or point ${JVM_DIR_ENV} at a folder holding it)")
    return pom


def hashed_dir(home: Path | None, name: str, *inputs: Path) -> Path:
    """``<jars home>/<name>-<sha256 of the inputs, 12 hex>``: where what a pom (and its
    sources) resolve to lives, so that a changed pom resolves again, beside the old."""
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in inputs)).hexdigest()[:12]
    return (home or jars_home()).resolve() / f"{name}-{digest}"


def target_dir(home: Path, use: str, root: Path) -> Path:
    """Where the jars of ``use`` live once resolved: named after the pom's content hash."""
    return hashed_dir(home, use, pom_path(root, use))


def _listed(folder: Path) -> list[Path] | None:
    """The jars ``folder/classpath.txt`` lists, or None if the folder is missing or incomplete."""
    listing = folder / CLASSPATH_FILE
    if not listing.is_file():
        return None
    jars = [folder / line.strip() for line in listing.read_text().splitlines() if line.strip()]
    if not jars or not all(jar.is_file() for jar in jars):
        return None
    return jars


def classpath(home: Path, use: str, root: Path) -> list[Path]:
    """The resolved jars of ``use``; raises SetupError (run 'make setup') if not resolved."""
    folder = target_dir(home, use, root)
    jars = _listed(folder)
    if jars is None:
        raise SetupError(f"the {use} jars pinned in {pom_path(root, use)} are not resolved "
                         f"(no complete {folder}): run 'make setup'")
    return jars


def spark_jars(home: Path | None = None) -> list[Path]:
    """The jars to put on ``spark.jars`` (Iceberg runtime, PostgreSQL driver)."""
    return classpath(home or jars_home(), "spark", repo_root())


def tools(*names: str, missing: str) -> list[str]:
    """The paths of the commands ``names``; a SetupError saying ``missing`` (what to install)
    when one is not on PATH."""
    found = [shutil.which(name) for name in names]
    if None in found:
        raise SetupError(missing)
    return [path for path in found if path is not None]


def maven() -> str:
    """The mvn command (a SetupError saying how to install it when missing)."""
    return tools("mvn", missing=MAVEN_MISSING)[0]


def _mvn_command(pom: Path, use: str, output: Path, *, force_update: bool) -> list[str]:
    mvn = maven()
    command = [mvn, "-B", "-q", "-Dstyle.color=never", "-f", str(pom),
               f"{DEPENDENCY_PLUGIN}:copy-dependencies", f"-DoutputDirectory={output}",
               "-DincludeScope=runtime"]
    if use == "spark":  # self-contained bundles: Spark ships everything they depend on
        command.append("-DexcludeTransitive=true")
    if force_update:  # retry what an earlier failed download left cached in ~/.m2
        command.append("-U")
    return command


def _run_mvn(pom: Path, use: str, output: Path) -> str | None:
    """Run Maven into ``output``; returns None on success, else what Maven printed."""
    printed = ""
    for force_update in (False, True):
        try:
            result = subprocess.run(_mvn_command(pom, use, output, force_update=force_update),
                                    capture_output=True, text=True, check=False,
                                    timeout=MVN_TIMEOUT_S, cwd=pom.parent)
        except subprocess.TimeoutExpired as exc:
            raise SetupError(f"Maven did not finish resolving {pom} within {MVN_TIMEOUT_S}s: "
                             "check network access to Maven Central (proxy settings in "
                             "~/.m2/settings.xml), then run 'make setup' again") from exc
        if result.returncode == 0:
            return None
        printed = result.stdout + "\n" + result.stderr
        if "cached in the local repository" not in printed:
            break
    return printed


def pinned(pom: Path) -> list[str]:
    """The ``group:artifact:version`` coordinates a pom lists as dependencies."""
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    project = ElementTree.parse(pom).getroot()
    props = {el.tag.split("}")[-1]: (el.text or "").strip()
             for el in project.findall("m:properties/*", ns)}
    coordinates = []
    for dep in project.findall("m:dependencies/m:dependency", ns):
        parts = [dep.findtext(f"m:{tag}", "", ns).strip()
                 for tag in ("groupId", "artifactId", "version")]
        coordinates.append(":".join(_PROPERTY.sub(lambda m: props.get(m[1], m[0]), part)
                                    for part in parts))
    return coordinates


def _mvn_failure(pom: Path, output: str) -> SetupError:
    lines = [_ANSI.sub("", line).rstrip() for line in output.splitlines()]
    errors = [line for line in lines if line.startswith("[ERROR]")] or lines
    errors = [_HELP.sub("", line) for line in errors if line.removeprefix("[ERROR]").strip()
              and not any(noise in line for noise in _MVN_NOISE)]
    tail = "\n".join(errors[-6:]) or "(Maven printed nothing)"
    try:
        artifacts = ", ".join(pinned(pom))
    except ElementTree.ParseError as exc:
        artifacts = f"unreadable pom: {exc}"
    return SetupError(
        f"Maven could not resolve the jars pinned in {pom} ({artifacts}) from Maven Central:\n"
        f"{tail}\n"
        "Check network access to https://repo.maven.apache.org (proxy settings go in "
        "~/.m2/settings.xml), then run 'make setup' again.")


def resolve(home: Path, root: Path, use: str) -> Path:
    """Copy the jars pinned for ``use`` into the state dir once; returns their folder.

    Does nothing if the folder is already complete. Safe to run concurrently: the loser of the
    final rename keeps the winner's folder and deletes its own.
    """
    pom = pom_path(root, use)
    final = target_dir(home, use, root)  # absolute: mvn runs in the pom's folder
    if _listed(final) is not None:
        _point_current(final, use)
        return final
    def fill(tmp: Path) -> None:
        output = _run_mvn(pom, use, tmp)
        jars = sorted(p.name for p in tmp.glob("*.jar"))
        if output is not None or not jars:
            raise _mvn_failure(pom, output or f"Maven succeeded but copied no jar into {tmp}")
        (tmp / CLASSPATH_FILE).write_text("".join(f"{name}\n" for name in jars))

    # a killed build's temporaries of any version of ``use`` are removed
    publish_folder(final, fill, lambda folder: _listed(folder) is not None,
                   stale=f".{use}-*.tmp*")
    _point_current(final, use)
    return final


def _point_current(final: Path, use: str) -> None:
    """Point ``<state_dir>/jars/<use>`` at ``final`` (atomically): a stable path for what cannot
    call Python, such as dbt's profiles.yml (``spark.jars: .sluice/jars/spark/*.jar``)."""
    link = final.parent / use
    if link.is_symlink() and os.readlink(link) == final.name:
        return
    tmp_link = final.parent / f".{use}.link-{os.getpid()}"
    tmp_link.unlink(missing_ok=True)
    tmp_link.symlink_to(final.name)
    os.replace(tmp_link, link)


MAVEN_MISSING = "Maven (mvn) is not installed: run 'make setup' (apt package maven)"


def copy_dependencies(pom: Path, output: Path, selection: str, what: str,
                      found: Callable[[Path], bool]) -> None:
    """Copy the artifacts ``pom`` pins into ``output`` with Maven's dependency plugin
    (``selection``: ``-DexcludeTransitive=true`` for the pinned artifact alone,
    ``-DincludeScope=runtime`` for a whole class path): the tools' poms (Apicurio, Connect,
    S3Proxy). A SetupError naming ``what`` and Maven's first errors when Maven fails or
    ``found(output)`` is false."""
    result = subprocess.run(
        [maven(), "-B", "-q", "-Dstyle.color=never", "-f", str(pom),
         f"{DEPENDENCY_PLUGIN}:copy-dependencies", f"-DoutputDirectory={output}", selection],
        capture_output=True, text=True, check=False, timeout=MVN_TIMEOUT_S)
    if result.returncode != 0 or not found(output):
        errors = [line for line in (result.stdout + result.stderr).splitlines()
                  if line.startswith("[ERROR]")][:4]
        raise SetupError(f"Maven could not fetch {what} pinned in {pom} from Maven Central:\n"
                         + "\n".join(errors) + "\nCheck network access to "
                         "https://repo.maven.apache.org, then run 'make setup' again.")


def print_or_fail(action: Callable[[], Iterable[object]]) -> int:
    """A runtime module's ``python -m`` command: print each folder ``action`` yields, or the
    SetupError it raises, saying what to do (exit status 2)."""
    try:
        for line in action():
            print(line)
    except SetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def resolve_command(argv: list[str], resolve_once: Callable[[Path | None], object]) -> int:
    """``resolve [JARS_DIR]`` (a bare JARS_DIR works too): ``resolve_once`` prints its folder."""
    args = argv[1:] if argv[:1] == ["resolve"] else argv
    return print_or_fail(lambda: [resolve_once(Path(args[0]) if args else None)])


def main(argv: list[str]) -> int:
    """``resolve [JARS_DIR]``: resolve every use; prints one classpath folder per line."""
    args = argv[1:] if argv[:1] == ["resolve"] else argv  # a bare STATE_DIR works too
    if len(args) > 1 or (args and args[0].startswith("-")):
        print("usage: python -m python_ingest.runtime.jars resolve [JARS_DIR]", file=sys.stderr)
        return 2
    home = Path(args[0]) if args else jars_home()
    return print_or_fail(lambda: (resolve(home, repo_root(), use) for use in USES))


if __name__ == "__main__":  # used by `make setup`
    sys.exit(main(sys.argv[1:]))
