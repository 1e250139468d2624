"""dbt, in-process, on the SparkSession the runner already holds.

dbt-spark's ``method: session`` profile calls ``SparkSession.builder.getOrCreate()``, which
returns the running session: the staging and lake models run on the same Spark and Iceberg
catalog as ingestion, without a second JVM. A failing dbt node raises PipelineError with dbt's
own message; the caller moves no checkpoint after it.

Checkpoints of lake merges ride in the merge's own commits: the runner wraps the dbt run in
``tables.formats.committing`` (Iceberg: a JVM thread-local of commit properties; Hudi: commit
metadata from session conf), so dbt runs single-threaded there.

What a process learns of a job from the parsed project (its models, its lake model's config,
the batch path's compiled SQL) is kept in ``target/sluice/<job>.json`` under a key of the
project's files, the environment dbt reads and dbt's and sluice's code (``project_key``): a
new process whose project is unchanged reads it there instead of importing dbt and parsing
the project, about 3-5 s of every `sluice run` process.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from python_ingest.config import Settings
from python_ingest.config.table_formats import session_format
from python_ingest.exceptions import PipelineError
from python_ingest.runtime.session import spark_conf, thread_session
from python_ingest.tables.names import JobModels

if TYPE_CHECKING:
    from dbt.contracts.graph.manifest import Manifest

log = logging.getLogger(__name__)

PROJECT_DIR_ENV = "SLUICE_DBT_PROJECT_DIR"
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the repo, the default dbt project
_LOCK = threading.Lock()  # dbt's invocation state is process-global
SAVED_DIR = ("target", "sluice")  # a job's saved entry, in its project
T = TypeVar("T")


def project_dir(settings: Settings) -> Path:
    """The dbt project: $SLUICE_DBT_PROJECT_DIR, else beside the config, else sluice's own."""
    if os.environ.get(PROJECT_DIR_ENV):
        return Path(os.environ[PROJECT_DIR_ENV]).resolve()
    if (settings.root / "dbt_project.yml").is_file():
        return settings.root
    return PACKAGE_ROOT


@dataclass(frozen=True)
class NodeResult:
    """What dbt did with one node."""

    unique_id: str
    status: str
    message: str


class Dbt:
    """Runs dbt commands in this process against ``settings``' catalog and session."""

    def __init__(self, settings: Settings, project: Path | None = None) -> None:
        self.settings = settings
        self.project = project or project_dir(settings)
        self._manifest: Manifest | None = None
        self._parsed_files: tuple[tuple[str, int, int], ...] = ()
        self._parse_lock = threading.Lock()  # one parse, also when job threads ask at once
        self._saved: dict[str, dict[str, Any]] = {}  # job -> its saved entry, checked
        self.batch_sql: dict[str, Any] = {}  # the batch path's compiled SQL per job (batch.py)

    def _env(self) -> dict[str, str]:
        """Profile variables so that profiles.yml describes the session we already run."""
        conf = spark_conf(self.settings)
        # the format of the session dbt runs on (a job's own table_format: runtime.session.
        # for_job); macros/sluice_table_format.sql reads it while models run
        session = thread_session()
        table_format = self.settings.table_format if session is None \
            else session_format(session).name
        env = {"SLUICE_SPARK_MASTER": conf["spark.master"],
               "SLUICE_SPARK_JARS": conf["spark.jars"],
               "SLUICE_TABLE_FORMAT": table_format}
        warehouse = conf.get(f"spark.sql.catalog.{self.settings.catalog.name}.warehouse")
        if warehouse:
            env["SLUICE_WAREHOUSE"] = warehouse
        return env

    @contextmanager
    def _environment(self) -> Iterator[None]:
        saved = {k: os.environ.get(k) for k in self._env()}
        os.environ.update(self._env())
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def invoke(self, command: Sequence[str], variables: Mapping[str, Any] | None = None,
               single_threaded: bool = False, parsed: bool = False) -> object:
        """Run one dbt command; returns dbt's result (a Manifest for ``parse``, a
        RunExecutionResult for ``run``), raises PipelineError when it fails.

        ``parsed``: run on the project as this object parsed it (no parse, no artifacts
        written: about 2 s less per call, what a runner doing batch after batch wants)."""
        from dbt.cli.main import dbtRunner

        manifest = self.manifest() if parsed else None
        args = [*command, "--project-dir", str(self.project), "--profiles-dir",
                str(self.project), "--target-path", str(self.project / "target"),
                "--log-path", str(self.project / "logs"), "--quiet"]
        if parsed:
            args.append("--no-write-json")
        if variables:
            args += ["--vars", json.dumps(dict(variables))]
        if single_threaded:
            args.insert(0, "--single-threaded")
        log.debug("dbt %s", " ".join(args))
        with _LOCK, self._environment(), _on_active_session():
            result = dbtRunner(manifest=manifest).invoke(args)
        if not result.success:
            raise PipelineError(f"dbt {' '.join(command)} failed: {_failure_message(result)}")
        return result.result

    def run(self, select: str, variables: Mapping[str, Any] | None = None,
            single_threaded: bool = False) -> list[NodeResult]:
        """``dbt run --select <select>``; the results of the nodes it ran."""
        result = self.invoke(["run", "--select", select], variables, single_threaded,
                             parsed=True)
        return [NodeResult(r.node.unique_id, str(r.status), r.message or "")
                for r in getattr(result, "results", [])]

    def compiled(self, select: str, variables: Mapping[str, Any] | None = None) -> str:
        """The SQL dbt compiles for one model with ``variables`` (``dbt compile``, on the
        parsed project: nothing written, nothing run but dbt's own look-ups). The model is
        selected by a glob of its file that does not spell its name: dbt prints the SQL of
        every model whose name is part of the selector's text."""
        from dbt.contracts.graph.nodes import ModelNode

        paths = [Path(n.original_file_path) for n in self.manifest().nodes.values()
                 if isinstance(n, ModelNode) and n.name == select]
        by = select
        if len(paths) == 1 and paths[0].name:
            by = f"path:{paths[0].parent / ('[' + paths[0].name[0] + ']' + paths[0].name[1:])}"
        result = self.invoke(["compile", "--select", by], variables, single_threaded=True,
                             parsed=True)
        for node in getattr(result, "results", []):
            if node.node.name == select:
                return str(node.node.compiled_code)
        raise PipelineError(f"dbt compile --select {select} compiled no model {select}")

    def model_config(self, model: str) -> Any:
        """The config of the model named ``model`` (anything with ``get``; the parsed project,
        or a lake model's saved entry while the project is not parsed), None when none."""
        if self._manifest is None:
            key = self.project_key()
            saved = next((e.get("lake_config") for e in self._saved.values()
                          if e["models"][1] == model and e.get("project") == key), None)
            if saved is not None:
                return saved
        from dbt.contracts.graph.nodes import ModelNode

        node = next((n for n in self.manifest().nodes.values()
                     if isinstance(n, ModelNode) and n.name == model), None)
        return None if node is None else node.config

    def manifest(self) -> Manifest:
        """The parsed project (cached until ``reload_if_changed`` finds an edit)."""
        with self._parse_lock:
            if self._manifest is None:
                files = self._project_files()
                self._manifest = cast("Manifest", self.invoke(["parse"]))
                self._parsed_files = files
            return self._manifest

    @property
    def parsed(self) -> bool:
        """Whether this object parsed the project (else it answered from saved entries)."""
        return self._manifest is not None

    def _project_files(self) -> tuple[tuple[str, int, int], ...]:
        """Path, mtime and size of every file dbt parses (models, macros, the project)."""
        found = []
        for folder in ("models", "macros", "seeds", "snapshots", "tests/dbt"):
            for path in sorted((self.project / folder).rglob("*")):
                if path.is_file():
                    stat = path.stat()
                    found.append((str(path), stat.st_mtime_ns, stat.st_size))
        for name in ("dbt_project.yml", "profiles.yml"):
            path = self.project / name
            if path.is_file():
                found.append((str(path), path.stat().st_mtime_ns, path.stat().st_size))
        return tuple(found)

    def reload_if_changed(self) -> bool:
        """Drop the parsed project when a file of it changed since (a fixed converter is
        picked up by a long-running runner on the failing job's next retry)."""
        if self._manifest is None or self._project_files() == self._parsed_files:
            return False
        log.info("dbt project %s changed: parsing it again", self.project)
        self._manifest = None
        self._saved.clear()
        return True

    def job_models(self, job_name: str) -> JobModels:
        """The converter reading raw.<job> and the lake model built on it, from the manifest
        (or from the job's saved entry while the project is unchanged)."""
        if self._manifest is None and (entry := self._saved_entry(job_name)) is not None:
            return JobModels(*entry["models"])
        from dbt.contracts.graph.nodes import ModelNode

        manifest = self.manifest()
        sources = {sid for sid, s in manifest.sources.items()
                   if s.schema == "raw" and s.identifier == job_name}
        models = {n.unique_id: n for n in manifest.nodes.values() if isinstance(n, ModelNode)}
        staging = [n for n in models.values() if set(n.depends_on.nodes) & sources]
        if not staging:
            raise PipelineError(
                f"no dbt model reads raw.{job_name}: add a converter "
                f"models/staging/<source>/stg_<source>__{job_name}.sql with a source whose "
                f"schema is raw and table is {job_name} (see docs/write-a-converter.md)")
        if len(staging) > 1:
            names = ", ".join(sorted(n.name for n in staging))
            raise PipelineError(f"several dbt models read raw.{job_name} ({names}): a job has "
                                "exactly one converter")
        converter = staging[0]
        lake = [n for n in models.values() if converter.unique_id in n.depends_on.nodes
                and n.config.materialized == "lake_merge"]
        if len(lake) > 1:
            names = ", ".join(sorted(n.name for n in lake))
            raise PipelineError(f"several lake models merge {converter.name} ({names})")
        if lake:
            _check_lake_config(lake[0])
        config = json.loads(json.dumps(lake[0].config.to_dict(), default=str)) if lake else {}
        self._save(job_name, models=[converter.name, lake[0].name if lake else None],
                   lake_config=config)
        return JobModels(converter.name, lake[0].name if lake else None)

    def prepare(self, job_names: Sequence[str]) -> None:
        """Each job's models before job threads ask for them: from their saved entries, else
        from one parse (a job whose models are wrong fails in its own run, saying why)."""
        for name in job_names:
            try:
                self.job_models(name)
            except PipelineError:
                continue

    def project_key(self) -> str:
        """What the project's models compile from, without parsing it: its files as parsed
        (or as they are, before a parse), the environment dbt reads (profiles.yml), and the
        code of dbt, its Spark adapter, sluice and its dbt plugin."""
        files = self._parsed_files if self._manifest is not None else self._project_files()
        return hashlib.sha256(repr((files, sorted(self._env().items()), _code_stamp())
                                   ).encode()).hexdigest()

    def _saved_path(self, job_name: str) -> Path:
        return self.project.joinpath(*SAVED_DIR, f"{job_name}.json")

    def _saved_entry(self, job_name: str) -> dict[str, Any] | None:
        """The job's saved entry when it was saved for this state of the project."""
        entry = self._saved.get(job_name)
        if entry is None:
            try:
                entry = json.loads(self._saved_path(job_name).read_text())
            except (OSError, ValueError):
                return None
        if not isinstance(entry, dict) or "models" not in entry \
                or entry.get("project") != self.project_key():
            self._saved.pop(job_name, None)  # saved for another state of the project
            return None
        self._saved[job_name] = entry
        return entry

    def _save(self, job_name: str, **fields: Any) -> None:
        """Keep ``fields`` in the job's saved entry (written whole, then renamed: a process
        reading it never sees half of it)."""
        key = self.project_key()
        entry = self._saved.get(job_name)
        entry = {**(entry if entry and entry.get("project") == key else {"project": key}),
                 **fields}
        self._saved[job_name] = entry
        path = self._saved_path(job_name)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            part = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
            part.write_text(json.dumps(entry))
            os.replace(part, path)
        except OSError as exc:  # a read-only project: the next process parses it again
            log.debug("could not save %s: %s", path, exc)

    def saved_sql(self, job_name: str, key: str) -> dict[str, Any] | None:
        """The batch path's compiled SQL saved for ``key`` (steps/compiled.py), if any."""
        entry = self._saved_entry(job_name)
        found = (entry or {}).get("compiled")
        return found if isinstance(found, dict) and found.get("key") == key else None

    def save_sql(self, job_name: str, key: str, **sql: str) -> None:
        """Keep the job's compiled SQL for ``key`` in its saved entry."""
        if self._saved_entry(job_name) is not None:
            self._save(job_name, compiled={"key": key, **sql})

    def saved_job_models(self, job_name: str) -> JobModels | None:
        """``job_models`` from the manifest dbt last wrote (``target/manifest.json``), without
        parsing the project (seconds): for commands that only read. None when there is no
        such file, a file of the project changed since it was written, or it does not name
        exactly one converter and at most one lake model (``job_models`` says what is wrong)."""
        path = self.project / "target" / "manifest.json"
        try:
            written = path.stat().st_mtime_ns
            if any(mtime > written for _, mtime, _ in self._project_files()):
                return None
            manifest = json.loads(path.read_text())
            sources = {sid for sid, s in manifest["sources"].items()
                       if s["schema"] == "raw" and s["identifier"] == job_name}
            models = [n for n in manifest["nodes"].values() if n["resource_type"] == "model"]
            staging = [n for n in models if set(n["depends_on"]["nodes"]) & sources]
            if len(staging) != 1:
                return None
            converter = staging[0]
            lake = [n for n in models if converter["unique_id"] in n["depends_on"]["nodes"]
                    and n["config"]["materialized"] == "lake_merge"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if len(lake) > 1:
            return None
        return JobModels(converter["name"], lake[0]["name"] if lake else None)


@functools.cache
def _code_stamp() -> tuple[str, str, int, int]:
    """dbt's and its Spark adapter's versions, and how many modules sluice and its dbt plugin
    have and their newest change, once per process (a runner of hundreds of jobs asks for
    ``project_key`` every batch)."""
    from importlib.metadata import version

    code = [p.stat().st_mtime_ns for folder in ("python_ingest", "dbt_sluice")
            for p in (PACKAGE_ROOT / folder).rglob("*.py")]
    return version("dbt-core"), version("dbt-spark"), len(code), max(code, default=0)


def _check_lake_config(node: Any) -> None:
    """A lake model's index settings, checked before any data moves (the materialization
    checks them again for a plain `dbt run`: macros/sluice_lake_index.sql)."""
    index = node.config.get("lake_index", "bucket")
    buckets = node.config.get("lake_buckets", 4)
    where = f"lake model {node.name} ({node.original_file_path})"
    if index not in ("bucket", "record"):
        raise PipelineError(f"{where}: lake_index is {index!r}; set it to 'bucket' (Hudi's "
                            "bucket index, the default) or 'record' (Hudi's record-level index)")
    if isinstance(buckets, bool) or not isinstance(buckets, (int, float)) or buckets < 1 \
            or buckets != int(buckets):
        raise PipelineError(f"{where}: lake_buckets is {buckets!r}; set it to a whole number "
                            "of buckets, 1 or more (4 by default; about one per 1-2 GB of the "
                            "table)")


@contextmanager
def _on_active_session() -> Iterator[None]:
    """Make dbt-spark's ``SparkSession.builder.getOrCreate()`` return the calling thread's
    active session: pyspark returns its first session otherwise, and would apply the profile's
    settings (default catalog, table format) to that one instead of the caller's. The thread's
    session is the JVM's (pyspark's own ``getActiveSession`` is process-wide): a continuous
    runner gives each job thread its own session (runner/scheduler.py)."""
    from pyspark.sql import SparkSession

    active = thread_session()
    previous = SparkSession._instantiatedSession
    if active is not None:
        SparkSession._instantiatedSession = active
    try:
        yield
    finally:
        SparkSession._instantiatedSession = previous


def _failure_message(result: Any) -> str:
    """dbt's own words for what failed: the failing nodes' messages, or the exception."""
    messages = []
    for node in getattr(result.result, "results", None) or []:
        if str(node.status) in ("error", "fail", "runtime error"):
            messages.append(f"{node.node.name}: {node.message}")
    if result.exception is not None:
        messages.append(str(result.exception))
    return "; ".join(messages) or "dbt reported failure without a message (see dbt's log)"
