"""What the Spark driver's JVM prints: its errors only, on stderr (stdout is sluice's: --json).

Left alone, a driver prints a dozen lines before sluice can set its log level: spark-submit's
"Warning: Ignoring non-Spark config property" for each non-``spark.`` key it is handed (Hudi's
``hoodie.*`` session settings), log4j's WARN lines of start-up (the host name, Hadoop's native
library, "Setting default log level"), and Hudi's JOL ("Unable to attach Serviceability Agent",
printed when it first sizes an object). Each is silenced where it starts:

* ``launch_jvm``: the JVM is started with the ``spark.*`` keys only; pyspark then copies every
  key the builder holds, ``hoodie.*`` too, into the SparkContext's conf (where a session, and a
  new session, reads them), as it did when they went through spark-submit;
* ``java_options``: a log4j2 configuration of sluice's own (ERROR and above to stderr, the level
  sluice set after start-up anyway: ``SparkContext.setLogLevel``), and JOL told not to try the
  Serviceability Agent (an attach to the JVM from a second process, which fails here: ptrace);
* ``quiet_jol``: JOL prints its warnings to ``System.out`` whatever the flags, once, when Hudi
  first sizes an object: it is made to do that at start, with ``System.out`` muted. What JOL
  then knows is what it knew after the failed attach.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from python_ingest.runtime.files import write_private

log = logging.getLogger(__name__)

CONFIG_NAME = "log4j2-driver.properties"  # in the state folder (written when it differs)
# JOL (org.openjdk.jol, shaded in Hudi's bundle): no attempt at the Serviceability Agent
JOL_OPTIONS = ("-Djol.skipHotspotSAAttach=true",)
LOG4J2 = """\
# sluice's Spark driver: errors only, on stderr (python_ingest/runtime/jvm_logs.py).
# A deployment wanting more sets spark.driver.extraJavaOptions=-Dlog4j2.configurationFile=...
status = error
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
rootLogger.level = error
rootLogger.appenderRef.stdout.ref = console
# pyspark's gateway starts logging as a shell does: Spark says "Setting default log level"
# unless the gateway's logger has a level of its own, equal to the root's
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
"""


def config_file(state_dir: Path) -> Path:
    """Where the driver's log4j2 configuration lives: ``<state_dir>/log4j2-driver.properties``."""
    return Path(state_dir) / CONFIG_NAME


def java_options(state_dir: Path) -> str:
    """The driver's JVM options of this module (``spark.driver.extraJavaOptions``)."""
    return " ".join((f"-Dlog4j2.configurationFile={config_file(state_dir)}", *JOL_OPTIONS))


def write_config(state_dir: Path) -> Path:
    """Write the log4j2 configuration the options name (only when it is missing or differs)."""
    path = config_file(state_dir)
    if not path.is_file() or path.read_text() != LOG4J2:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_private(path, LOG4J2)
    return path


def launch_jvm(conf: Mapping[str, str]) -> None:
    """Start pyspark's JVM (if this process has none yet) with the ``spark.*`` keys of
    ``conf`` only: spark-submit warns of every other key and drops it, while the SparkContext
    pyspark creates next gets all of them from the builder (pyspark copies its whole conf
    into the JVM's), so nothing is lost by leaving them out here."""
    from pyspark import SparkConf, SparkContext

    if SparkContext._gateway is not None:
        return
    launch = SparkConf(loadDefaults=False)
    launch.setAll([(k, v) for k, v in conf.items() if k.startswith("spark.")])
    SparkContext._ensure_initialized(conf=launch)


def quiet_jol(jvm: Any) -> None:
    """Have JOL (Hudi's object sizes) find its bearings now, its warnings ("Unable to attach
    Serviceability Agent", "Unable to get Instrumentation") sent nowhere; a JVM without Hudi's
    bundle is left alone."""
    system = jvm.java.lang.System
    out = system.out
    system.setOut(jvm.java.io.PrintStream(jvm.java.io.OutputStream.nullOutputStream()))
    try:
        jvm.org.apache.hudi.org.openjdk.jol.vm.VM.current()
    except Exception:  # noqa: BLE001 (no such class: py4j's JavaPackage is not callable)
        log.debug("no JOL in this JVM", exc_info=True)
    finally:
        system.setOut(out)
