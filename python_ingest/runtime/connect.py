"""Kafka Connect with Debezium's connectors, as users run Debezium: for tests and benches.

``jvm/connect/pom.xml`` pins Apache Kafka's Connect runtime,
``io.debezium:debezium-connector-mariadb`` and ``debezium-connector-postgres``. ``make setup``
runs ``python -m python_ingest.runtime.connect resolve``, which copies them and their runtime
closure with Maven into ``<jars home>/connect-<sha256 of the pom, 12 hex>/`` (built under a
temporary name and renamed, as the other jars are). ``start_standalone`` runs a standalone
worker (offsets in a file) with one or more connectors, its REST API on a free loopback port
(http, or https with ``https``: the listener's key store; runtime/connect_rest.py is the client),
and waits until the API answers and every connector's task runs. Nothing is fetched at run time.

JSON is the worker's default; ``avro_converters`` gives a connector Avro with a Schema Registry:
Apicurio's Kafka Connect AvroConverter (pinned in the pom), set to write as Confluent's
converter does, so what lands is what any Confluent-framed Avro topic holds.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from python_ingest.exceptions import SetupError
from python_ingest.runtime.connect_rest import ConnectRest, ConnectRestError
from python_ingest.runtime.jars import copy_dependencies, hashed_dir, repo_root, resolve_command
from python_ingest.runtime.processes import free_port, stop_server
from python_ingest.runtime.publish import publish_folder

POM = Path("jvm") / "connect" / "pom.xml"
CLASSPATH_FILE = "classpath.txt"
MAIN = "org.apache.kafka.connect.cli.ConnectStandalone"
AVRO_CONVERTER = "io.apicurio.registry.utils.converter.AvroConverter"
APICURIO_API = "/apis/registry/v2"  # the API Apicurio's 2.x converter speaks (Apicurio 3 too)


def jars_dir(home: Path | None = None, root: Path | None = None) -> Path:
    """Where the pinned jars live: named after the pom's content hash."""
    return hashed_dir(home, "connect", (root or repo_root()) / POM)


def classpath(home: Path | None = None) -> list[Path]:
    """The resolved jars; SetupError (run 'make setup') when they are not."""
    folder = jars_dir(home)
    listing = folder / CLASSPATH_FILE
    if not listing.is_file():
        raise SetupError(f"Kafka Connect and Debezium are not resolved in {folder}: run "
                         "'make setup'")
    return [folder / line for line in listing.read_text().split() if line]


def resolve(home: Path | None = None, root: Path | None = None) -> Path:
    """Copy the pinned jars from Maven Central once; returns their folder."""
    root = root or repo_root()
    final = jars_dir(home, root)
    if (final / CLASSPATH_FILE).is_file():
        return final

    def fill(tmp: Path) -> None:
        copy_dependencies(root / POM, tmp, "-DincludeScope=runtime", "the jars",
                          lambda folder: any(folder.glob("*.jar")))
        jars = sorted(p.name for p in tmp.glob("*.jar"))
        (tmp / CLASSPATH_FILE).write_text("".join(f"{name}\n" for name in jars))

    publish_folder(final, fill, lambda folder: (folder / CLASSPATH_FILE).is_file())
    return final


@dataclass
class ConnectWorker:
    """A running standalone Connect worker and the names of its connectors."""

    process: subprocess.Popen[bytes]
    rest: str  # http(s)://127.0.0.1:<port>
    connectors: tuple[str, ...]
    log: Path
    client: ConnectRest

    def status(self, connector: str) -> dict[str, Any]:
        return self.client.status(connector)

    def stop(self) -> None:
        stop_server(self.process, 60)


def avro_converters(registry: str) -> dict[str, str]:
    """A connector's settings for Avro with a Schema Registry, as Confluent's AvroConverter
    writes it: keys and values registered under TopicNameStrategy subjects (``<topic>-key``,
    ``<topic>-value``), each message framed by magic byte 0 and the 4-byte schema id that
    the registry's Confluent API serves for it (Apicurio's content id), no headers; the Avro
    schemas keep Connect's names (``connect.name``: Debezium's logical types).
    ``registry``: Apicurio Registry's base URL (``http://host:8080``)."""
    settings: dict[str, str] = {}
    for side in ("key", "value"):
        prefix = f"{side}.converter"
        settings.update({
            prefix: AVRO_CONVERTER,
            f"{prefix}.apicurio.registry.url": registry.rstrip("/") + APICURIO_API,
            f"{prefix}.apicurio.registry.auto-register": "true",
            # Confluent's framing: a 4-byte id in the payload (not Apicurio's 8-byte global
            # id, not Kafka headers), and the content id, which /apis/ccompat serves as the id
            f"{prefix}.apicurio.registry.as-confluent": "true",
            f"{prefix}.apicurio.registry.use-id": "contentId",
            f"{prefix}.apicurio.registry.headers.enabled": "false",
        })
    return settings


def _properties(values: Mapping[str, object]) -> str:
    return "".join(f"{key}={value}\n" for key, value in values.items())


def start_standalone(folder: Path, bootstrap: str, connectors: Sequence[Mapping[str, object]],
                     *, worker: Mapping[str, object] | None = None, heap: str = "512m",
                     wait_s: float = 120.0, https: Mapping[str, str] | None = None,
                     client: Mapping[str, Any] | None = None) -> ConnectWorker:
    """Start a standalone worker in ``folder`` running ``connectors`` (each its properties,
    with ``name``); returns once every connector's task is RUNNING. Converters default to
    JSON with schemas (a connector may set its own); ``worker`` overrides any worker
    setting. ``https``: the REST listener is https, with these ``ssl.*`` settings (its key
    store; Kafka reads them under ``listeners.https.``); ``client``: ConnectRest's fields
    for talking to it (``ca_file``, ``user``, ``password``...)."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    scheme = "https" if https else "http"
    settings = {
        "bootstrap.servers": bootstrap,
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": "true",
        "value.converter.schemas.enable": "true",
        "offset.storage.file.filename": str(folder / "offsets.dat"),
        "offset.flush.interval.ms": "1000",
        "listeners": f"{scheme}://127.0.0.1:{port}",
        **{f"listeners.https.{key}": value for key, value in (https or {}).items()},
        # plugins from their ServiceLoader manifests (Kafka's, Debezium's): no reflective scan
        # of the ~100 jars (6 s of the worker's start here); a class without a manifest, as
        # Apicurio's converter, still loads by its name from the classpath
        "plugin.discovery": "service_load",
        **(worker or {}),
    }
    (folder / "worker.properties").write_text(_properties(settings))
    files = []
    for number, connector in enumerate(connectors):
        files.append(folder / f"connector-{number}.properties")
        files[-1].write_text(_properties(connector))
    (folder / "log4j2.properties").write_text(
        "rootLogger.level = INFO\nrootLogger.appenderRef.file.ref = FILE\n"
        "appender.file.type = File\nappender.file.name = FILE\n"
        f"appender.file.fileName = {folder / 'connect.log'}\n"
        "appender.file.layout.type = PatternLayout\n"
        "appender.file.layout.pattern = %d %p %c{1}: %m%n\n")
    java = shutil.which("java")
    if java is None:
        raise SetupError("no java on PATH: run 'make setup' (Java 17)")
    command = [java, f"-Xmx{heap}", "-cp", ":".join(map(str, classpath())),
               f"-Dlog4j2.configurationFile={folder / 'log4j2.properties'}",
               MAIN, str(folder / "worker.properties"), *map(str, files)]
    log = folder / "connect.out"
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=folder, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    rest = f"{scheme}://127.0.0.1:{port}"
    handle = ConnectWorker(process, rest, tuple(str(c["name"]) for c in connectors),
                           folder / "connect.log", ConnectRest(rest, **{"timeout_s": 5.0,
                                                                        **(client or {})}))
    deadline = time.monotonic() + wait_s
    states: dict[str, str] = {name: "not started" for name in handle.connectors}
    answered = False
    while time.monotonic() < deadline and process.poll() is None:
        try:
            answered = answered or handle.client.get("/") is not None
            for name in handle.connectors:
                tasks = handle.status(name).get("tasks") or []
                states[name] = ",".join(str(t.get("state")) for t in tasks) or "no task"
        except ConnectRestError as exc:
            if not exc.retry:  # a certificate or a login: waiting cures neither
                handle.stop()
                raise
        if answered and all(set(state.split(",")) == {"RUNNING"} for state in states.values()):
            return handle
        if any("FAILED" in state for state in states.values()):
            break
        time.sleep(0.5)
    handle.stop()
    text = handle.log.read_text(errors="replace") if handle.log.exists() else ""
    errors = [line for line in text.splitlines() if " ERROR " in line][-8:]
    shown = ", ".join(f"{name}: {state}" for name, state in states.items())
    raise SetupError(f"the Kafka Connect worker's connectors did not all run ({shown}; log "
                     f"{handle.log}):\n" + "\n".join(errors))


def main(argv: list[str]) -> int:
    """``resolve [JARS_DIR]``: resolve the pinned jars once; prints their folder."""
    return resolve_command(argv, resolve)


if __name__ == "__main__":  # used by `make setup`
    sys.exit(main(sys.argv[1:]))
