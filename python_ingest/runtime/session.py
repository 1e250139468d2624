"""The one place that builds the SparkSession.

Tables are addressed as ``raw.trips``, ``errors.trips__raw``, ``lake.trips`` by sluice and dbt
alike, in the default catalog of the configured table format (docs/formats.md):

- ``hudi`` (default): Spark's session catalog with Hudi's ``HoodieCatalog``; tables live at
  ``<warehouse>/<namespace>/<table>`` and each process registers them at start;
- ``iceberg``: the Iceberg catalog named in config (a Hadoop catalog by default, or a JDBC
  catalog on PostgreSQL that several processes and hosts share: config/catalog.py).

Both formats' jars, extensions and the Kryo serializer Hudi wants are always configured, and
the Iceberg catalog is always there under its own name.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from python_ingest.config import JobConfig, Settings
from python_ingest.config.s3 import warehouse_location
from python_ingest.config.secrets import redact
from python_ingest.config.table_formats import (
    FORMAT_CONF,
    format_named,
    project_format,
    session_format,
)
from python_ingest.exceptions import ConfigError
from python_ingest.runtime.catalog import (
    HUDI_COMMIT_PREFIX,
    HUDI_READ_CONF,
    HUDI_WRITE_CONF,
    INSERT_OPERATION,
    PERMISSIONS_CONF,
    WAREHOUSE_CONF,
    register_tables,
    restrict_namespace,
)
from python_ingest.runtime.pydaemon import MODULE as PYDAEMON
from python_ingest.runtime.s3 import s3_conf

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

NAMESPACES = ("raw", "errors", "staging", "lake", "meta", "marts")  # marts: models/marts
# generated classes Spark keeps compiled (spark.sql.codegen.cache.maxEntries; its default 100)
CODEGEN_CACHE_ENTRIES = 2000
# Spark's memory pages (spark.buffer.pageSize): at least this, and large enough that a task's
# 8,192 pages (Spark's page table) cover the whole heap
MIN_PAGE_BYTES = 1 << 20
PAGE_TABLE_SIZE = 8192
POOL_PREFIX = "sluice_job_"  # each job's Spark FAIR pool: sluice_job_<job> (runner, run --all)


def spark_conf(settings: Settings) -> dict[str, str]:
    """The full Spark conf for these settings (also what dbt's profile passes on)."""
    from python_ingest.runtime import cds, jvm_logs  # lazy: table names need no classpath
    from python_ingest.runtime.jars import spark_jars
    from python_ingest.runtime.localfs import FS_CLASS, JAR_NAME, driver_classpath

    jars = spark_jars()
    driver_jars = driver_classpath(jars)  # once: the CDS archive's key is this class path
    cat = settings.catalog
    prefix = f"spark.sql.catalog.{cat.name}"
    conf = {
        "spark.master": settings.spark.master,
        "spark.app.name": settings.spark.app_name,
        "spark.jars": ",".join(str(j) for j in jars),
        # and on the driver's own class path: Avro resolves Hudi's generated record classes
        # (HoodieDeleteRecord in a log file's delete block) through the application class
        # loader, and a jar only added by spark.jars loads them a second time, in Spark's
        # loader: "GenericData$Record cannot be cast to HoodieDeleteRecord" (hudi #13410)
        # (with the local file system that needs no chmod process per file, if set-up built
        # it: runtime/localfs.py; always there, so the class-data-sharing archive fits)
        "spark.driver.extraClassPath": ":".join(str(j) for j in driver_jars),
        # the same on executors of a cluster (Hudi reads log files there too): the jars must
        # sit at the same path on every node (docs/deploy.md); a path a node lacks is skipped
        # and the copy spark.jars ships is used
        "spark.executor.extraClassPath": ":".join(str(j) for j in jars),
        "spark.sql.extensions":
            "org.apache.spark.sql.hudi.HoodieSparkSessionExtension,"
            "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "spark.serializer": "org.apache.spark.serializer.KryoSerializer",
        "spark.kryo.registrator": "org.apache.spark.HoodieSparkKryoRegistrar",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.hudi.catalog.HoodieCatalog",
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": cat.type,
        # Other processes (tap, CLI runs, dbt) commit to the same tables: always read fresh.
        f"{prefix}.cache-enabled": "false",
        "spark.sql.filesourceTableRelationCacheSize": "0",
        # dates and timestamps as the source holds them (proleptic Gregorian, as Iceberg
        # writes them): Spark's parquet and Avro writers (Hudi's) refuse dates before 1582
        "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
        "spark.sql.parquet.datetimeRebaseModeInRead": "CORRECTED",
        "spark.sql.parquet.int96RebaseModeInWrite": "CORRECTED",
        "spark.sql.parquet.int96RebaseModeInRead": "CORRECTED",
        "spark.sql.avro.datetimeRebaseModeInWrite": "CORRECTED",
        "spark.sql.avro.datetimeRebaseModeInRead": "CORRECTED",
        WAREHOUSE_CONF: warehouse_location(cat.warehouse, settings.root),  # or s3a://...
        PERMISSIONS_CONF: settings.table_permissions,
        "hoodie.datasource.write.commitmeta.key.prefix": HUDI_COMMIT_PREFIX,
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4",
        # Spark keeps the classes it generated for the last 100 distinct queries' operators
        # by default; one batch's statements generate more than that, so every batch compiled
        # its code again (janino, then the JIT). A larger cache keeps them warm: a warm
        # 100-event batch 6.3 s against 7.1 s (bench/batch_profile.py), and two test files
        # compiled 917 classes instead of 4,218
        "spark.sql.codegen.cache.maxEntries": str(CODEGEN_CACHE_ENTRIES),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": "4g",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.sql.warehouse.dir": str(settings.path(settings.state_dir) / "spark-warehouse"),
        # (and the class-data-sharing archive `make setup` built, if any: runtime/cds.py)
        # (and the driver's log settings: errors only, on stderr: runtime/jvm_logs.py)
        "spark.driver.extraJavaOptions":
            f"-Dderby.system.home={settings.path(settings.state_dir)} "
            f"{jvm_logs.java_options(settings.path(settings.state_dir))} "
            f"{cds.java_options(driver_jars)}".strip(),
    }
    if settings.spark.master.startswith("local"):
        # pyspark's worker daemon without the work it repeated for every Python task
        # (runtime/pydaemon.py): the driver's own Python runs it, so python_ingest is there; a
        # cluster's executors may only get python_ingest per task (spark.submit.pyFiles),
        # too late for the daemon's start, and keep pyspark's (docs/deploy.md)
        conf["spark.python.daemon.module"] = PYDAEMON
        if driver_jars and driver_jars[-1].name == JAR_NAME:  # set-up built it
            # local Spark's files without a chmod process each (runtime/localfs.py); a
            # cluster's executors may lack the jar and keep Hadoop's own
            conf["spark.hadoop.fs.file.impl"] = FS_CLASS
    conf.update(_catalog_conf(settings, prefix))
    conf.update(s3_conf(cat, conf[WAREHOUSE_CONF]))  # a warehouse on S3 (runtime/s3.py)
    # Hudi's write settings only touch Hudi writes: always there, so that a job whose own
    # table_format is hudi in an Iceberg project writes as a Hudi project's jobs do
    conf.update(HUDI_WRITE_CONF)
    conf.update(HUDI_READ_CONF)
    # SQL appends (dbt's staging models, the merge's error and index rows) go to append-only
    # tables: new files, no rewrite of earlier small files, no index look-up (a bucket lake's
    # merge upserts: it sets the operation around its insert)
    conf[INSERT_OPERATION] = "bulk_insert"
    conf.update(format_conf(settings, settings.table_format))
    conf.update(settings.spark.conf)
    conf.setdefault("spark.buffer.pageSize", page_size(conf))
    return conf


def page_size(conf: dict[str, str]) -> str:
    """``spark.buffer.pageSize`` for a conf: the smallest power of two, at least 1 MiB, whose
    8,192 pages hold the larger of the driver's and the executors' heaps.

    Without it Spark makes each page up to 64 MiB (its heap / cores / 16), and every sort or
    aggregation of every task takes at least one whole page, zeroed, whatever the rows: a
    runner catching four small jobs up held eleven 64 MiB arrays at once (a heap dump), 1.2 GB
    live against 160 MB with 1 MiB pages, and a warm 100-event batch took 4.55-4.85 s against
    4.92-6.14 s (bench/batch_profile.py, three runs each). A task can hold no more than 8,192
    pages, so a large executor keeps larger pages."""
    heap = max(_heap_bytes(conf, "spark.driver.memory"),
               _heap_bytes(conf, "spark.executor.memory"))
    page = MIN_PAGE_BYTES
    while page * PAGE_TABLE_SIZE < heap:
        page *= 2
    return f"{page >> 10}k"


def _heap_bytes(conf: dict[str, str], key: str) -> int:
    """A heap setting in bytes, read as Spark reads it: ``4g``, ``512m``, ``1024k``, and a
    number without a unit in MiB; Spark's default 1g when it is not set."""
    text = str(conf.get(key, "1g")).strip().lower().removesuffix("b")
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    scale = units.get(text[-1:], 1 << 20)
    try:
        return int(float(text[:-1] if text[-1:] in units else text) * scale)
    except ValueError:
        raise ConfigError(f"spark.conf.{key}", f"{conf[key]!r} is not a memory size",
                          "write it as Spark does, e.g. 4g or 512m") from None


def format_conf(settings: Settings, table_format: str) -> dict[str, str]:
    """The session settings that differ between a session writing Hudi and one writing
    Iceberg (the default catalog, and the format sluice's table functions use)."""
    spec = format_named(table_format)
    return {FORMAT_CONF: spec.name,
            "spark.sql.defaultCatalog": spec.default_catalog(settings.catalog.name)}


def _catalog_conf(settings: Settings, prefix: str) -> dict[str, str]:
    """The Iceberg catalog's own keys (config/catalog.py)."""
    cat = settings.catalog
    if cat.type in ("hadoop", "jdbc"):  # a folder sluice manages: relative to sluice.yml
        conf = {f"{prefix}.warehouse": warehouse_location(cat.warehouse, settings.root)}
    else:
        conf = {f"{prefix}.warehouse": cat.warehouse} if cat.warehouse else {}
    if cat.type == "jdbc":
        conf[f"{prefix}.uri"] = cat.jdbc_url()
        # Spark redacts conf keys naming a password (spark.redaction.regex) in its UI and logs
        if cat.user:
            conf[f"{prefix}.jdbc.user"] = cat.user
        password = cat.reveal_password()
        if password is not None:
            conf[f"{prefix}.jdbc.password"] = password
        conf.update({f"{prefix}.jdbc.{key}": value for key, value in cat.jdbc_ssl().items()})
    elif cat.type != "hadoop":
        conf[f"{prefix}.uri"] = str(cat.uri)
    return conf


def build_session(settings: Settings, every_table: bool = False) -> SparkSession:
    """Create (or return the running) SparkSession with the Iceberg catalog and namespaces.

    On Hudi the session names the shared tables at start, or every table of the warehouse
    with ``every_table`` (a plain ``dbt run``); a job's own tables are named when the process
    first works on the job (``tables.formats.name_tables``)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    active = thread_session()
    if active is not None:
        return active
    from python_ingest.runtime import jvm_logs, py4j_lookups

    py4j_lookups.install()  # each Py4J name asked of the JVM once per process
    conf = spark_conf(settings)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    log.info("starting Spark (%s), catalog %s at %s", redact(settings.spark.master),
             settings.catalog.name, redact(settings.catalog.warehouse))
    jvm_logs.write_config(settings.path(settings.state_dir))
    jvm_logs.launch_jvm(conf)  # spark.* keys only: no warning per hoodie.* key
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    # the JVM's own prints (a library's warnings) go to stderr: stdout is sluice's (--json)
    jvm = session._jvm
    assert jvm is not None
    jvm_logs.quiet_jol(jvm)
    jvm.java.lang.System.setOut(jvm.java.lang.System.err)
    prepare_catalog(session, every_table)
    return session


def prepare_catalog(session: SparkSession, every_table: bool = False) -> None:
    """Create sluice's namespaces and, on Hudi, name the tables other processes created: the
    shared ones, or with ``every_table`` all (``register_tables``). Every namespace holds
    source rows: its folder is owner-only (or open to the group: ``table_permissions``),
    created so before anything is written in it, and set so at every session start."""
    for namespace in NAMESPACES:
        restrict_namespace(session, namespace)
    if session_format(session).session_catalog:
        found = register_tables(session, NAMESPACES, every_table)
        log.info("registered %d %sHudi tables of %s", found, "" if every_table else "shared ",
                 session.conf.get(WAREHOUSE_CONF))
    else:
        try:
            for namespace in NAMESPACES:
                create_namespace(session, namespace)
        except Exception as exc:  # a JDBC catalog's database refusing TLS: name the setting
            from python_ingest.config.catalog import tls_failure
            from python_ingest.exceptions import SetupError

            message = tls_failure(str(exc))
            if message is None:
                raise
            raise SetupError(message) from None


def create_namespace(session: SparkSession, namespace: str) -> None:
    """``create namespace if not exists``, also when another process creates it at the same
    moment: Spark checks, then creates, and a shared catalog (JDBC) refuses the second insert
    of the namespace's row, so two sluice processes started together on one catalog would
    see one of them fail at start. A namespace that exists after the refusal is fine."""
    try:
        session.sql(f"create namespace if not exists {namespace}")
    except Exception:
        if not session.sql(f"show namespaces like '{namespace}'").take(1):
            raise
        log.info("namespace %s was created by another process at the same time", namespace)


def activate(spark: SparkSession) -> None:
    """Make ``spark`` the active session of the calling thread.

    Spark keeps the active session per JVM thread; a Python thread (py4j gives it its own JVM
    thread) that did not build the session has none, and some catalog look-ups then resolve
    names against a default configuration (``spark_catalog`` instead of sluice's catalog).
    Call this first in any thread that runs Spark work on a shared session.
    """
    jvm = spark._jvm
    assert jvm is not None
    jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)


def job_session(spark: SparkSession, settings: Settings, job: JobConfig) -> SparkSession:
    """A session of its own for one job of a continuous runner: the same SparkContext,
    catalogs and settings, but its own SQL settings, so commit metadata one job sets while it
    writes (Hudi reads ``sluice.*`` session settings into its commits) never lands in another
    job's commit; it writes the job's table format (``table_format`` on the job)."""
    from pyspark.sql import SparkSession

    session = SparkSession(spark.sparkContext, spark._jsparkSession.cloneSession())
    return _writing(session, settings, settings.format_of(job))


def for_job(spark: SparkSession, settings: Settings, job: JobConfig) -> SparkSession:
    """The session that writes ``job``'s tables: ``spark`` itself when the job has the
    format ``spark`` writes, else a session on the same SparkContext writing the job's format
    (one per format and process). Tables keep their names (``raw.<job>``, ``lake.<model>``):
    a session resolves them in its own format's catalog, so dbt's two-part names work too."""
    wanted = settings.format_of(job)
    if session_format(spark).name == wanted:
        return spark
    return _format_session(spark, settings, wanted)


def project_session(spark: SparkSession) -> SparkSession:
    """The session writing the project's format (meta.runs lives there) for any session of
    this application: the project's format is the one the SparkContext was started with."""
    project = project_format(spark).name
    if session_format(spark).name == project:
        return spark
    return _format_session(spark, None, project)


_FORMAT_SESSIONS: dict[str, SparkSession] = {}  # per format, of the running SparkContext


def _format_session(spark: SparkSession, settings: Settings | None,
                    table_format: str) -> SparkSession:
    found = _FORMAT_SESSIONS.get(table_format)
    if found is None or found.sparkContext is not spark.sparkContext:
        session = spark.newSession()  # the application's settings: the project's format
        if settings is not None:
            session = _writing(session, settings, table_format)
        found = _FORMAT_SESSIONS[table_format] = session
    return found


def _writing(session: SparkSession, settings: Settings, table_format: str) -> SparkSession:
    """``session`` set to write ``table_format`` (its catalog's namespaces ready)."""
    if session_format(session).name == table_format:
        return session
    for key, value in format_conf(settings, table_format).items():
        session.conf.set(key, value)
    previous = thread_session()
    activate(session)
    try:
        prepare_catalog(session)
    finally:
        if previous is not None:
            activate(previous)
    return session


@contextmanager
def active(spark: SparkSession) -> Iterator[SparkSession]:
    """Make ``spark`` the calling thread's active session for a block, then restore the one
    before (name look-ups read the default catalog from the thread's active session)."""
    previous = thread_session()
    activate(spark)
    try:
        yield spark
    finally:
        if previous is not None:
            activate(previous)


def thread_session() -> SparkSession | None:
    """The calling thread's active SparkSession as the JVM knows it (None: no Spark yet).

    Not pyspark's ``getActiveSession``: that returns the session a DataFrame was last created
    on anywhere in the process (a class attribute), which with two sessions on one
    SparkContext (a runner's job sessions, the tests' second format) need not be this
    thread's."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    sc = SparkContext._active_spark_context
    if sc is None or sc._jvm is None:
        return SparkSession.getActiveSession()
    found = sc._jvm.org.apache.spark.sql.SparkSession.getActiveSession()
    if not found.isDefined():
        return SparkSession.getActiveSession()
    jsession = found.get()
    known = SparkSession._instantiatedSession
    if known is not None and known._jsparkSession.equals(jsession):
        return known
    return SparkSession(sc, jsession)


def jvm_exit() -> str | None:
    """Why this process's Spark JVM is gone, if it has exited (None while it runs, or when no
    Spark was started): its exit code and what the code means."""
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)  # spark-submit execs the JVM itself
    if proc is None or proc.poll() is None:
        return None
    code = proc.returncode
    meaning = {52: "out of Java heap: raise spark.driver.memory (spark.conf in sluice.yml)",
               -9: "killed by SIGKILL: the kernel's out-of-memory killer or a kill -9",
               50: "an uncaught exception (the lines above name it)"}
    return f"Spark's JVM (pid {proc.pid}) exited with code {code}: " + meaning.get(
        code, "see the lines above for its last words")
