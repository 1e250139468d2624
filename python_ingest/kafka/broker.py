"""The embedded broker: a real single-node Apache Kafka (KRaft, broker and controller in one JVM).

Used when ``broker.embedded`` is true (the default); production points
``broker.bootstrap_servers`` at a real cluster and never starts anything. The jars are pinned in
``jvm/kafka/pom.xml`` and resolved by ``make setup``. The broker runs detached (it outlives the
command that started it); its data dir holds ``broker.pid``, ``broker.json`` (controller port and
version, reused on restart), ``server.properties`` and ``log4j2.properties`` (rewritten on every
start), ``broker.log`` (INFO, rolled at 10 MB), ``broker.out`` (the JVM's own output),
``broker.lock`` and ``kafka/`` (topics and the KRaft metadata log, formatted once).
"""

from __future__ import annotations

import base64
import fcntl
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from python_ingest.config import Settings
from python_ingest.exceptions import BrokerError, SetupError
from python_ingest.runtime import jars

log = logging.getLogger(__name__)

PID_FILE = "broker.pid"
STATE_FILE = "broker.json"
LOG_FILE = "broker.log"
OUT_FILE = "broker.out"
LOG_DIRS = "kafka"
NODE_ID = 1
# Small footprint, quick start. C2 stays on (TieredStopAtLevel=1 started only ~0.2 s faster
# but would slow the broker down in benchmarks).
JVM_FLAGS = ("-XX:+UseSerialGC", "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
             "-Dfile.encoding=UTF-8")
STOP_TIMEOUT_S = 20.0

# Brokers this process started: polled, so they never linger as zombies of a long-lived process.
_children: dict[int, subprocess.Popen[bytes]] = {}

_QUIET = ("org.apache.kafka.common.config.AbstractConfig",  # full config dumps
          "kafka.request.logger", "state.change.logger", "kafka.authorizer.logger")
LOG4J2 = """\
status = warn
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = {log}
appender.file.filePattern = {log}.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 10MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
""" + "".join(f"logger.q{i}.name = {name}\nlogger.q{i}.level = WARN\n"
              for i, name in enumerate(_QUIET))


@dataclass(frozen=True)
class BrokerStatus:
    """What ``status`` reports about the embedded broker of a data dir."""

    running: bool
    pid: int | None
    bootstrap: str
    data_dir: Path
    version: str | None


@dataclass
class EmbeddedBroker:
    """A running embedded broker (possibly started by another process)."""

    data_dir: Path
    host: str
    port: int
    controller_port: int
    pid: int
    version: str

    @property
    def bootstrap(self) -> str:
        """The ``host:port`` clients connect to."""
        return f"{self.host}:{self.port}"

    def is_running(self) -> bool:
        """Whether the broker's JVM is still alive."""
        return _alive(self.pid, self.data_dir)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> bool:
        """Shut the broker down cleanly (SIGKILL after ``timeout_s``); True if it was running."""
        return _stop_pid(self.data_dir, timeout_s)


def _host_port(bootstrap: str) -> tuple[str, int]:
    first = bootstrap.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    return host or "127.0.0.1", int(port)


def is_up(bootstrap: str, timeout_s: float = 0.5) -> bool:
    """Whether something accepts TCP connections at the first bootstrap address."""
    host, port = _host_port(bootstrap)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _alive(pid: int, data_dir: Path) -> bool:
    """Whether ``pid`` is a live (not zombie) Kafka JVM serving ``data_dir``."""
    child = _children.get(pid)
    if child is not None:
        if child.poll() is None:
            return True
        del _children[pid]
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path(f"/proc/{pid}")
    if not proc.is_dir():  # no procfs: trust the signal probe
        return True
    try:
        state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (OSError, IndexError):
        return False
    return state != "Z" and "kafka.Kafka" in cmdline and str(data_dir) in cmdline


def _read_pid(data_dir: Path) -> int | None:
    """The pid of the broker serving ``data_dir`` (resolved); removes a stale pid file."""
    pid_file = data_dir / PID_FILE
    with suppress(OSError, ValueError):
        pid = int(pid_file.read_text().strip())
        if _alive(pid, data_dir):
            return pid
    pid_file.unlink(missing_ok=True)
    return None


def _stop_pid(data_dir: Path, timeout_s: float) -> bool:
    pid = _read_pid(data_dir)
    if pid is None:
        return False
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while _alive(pid, data_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid, data_dir):
        log.warning("embedded broker (pid %d) did not stop within %.0fs: killing it", pid,
                    timeout_s)
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _alive(pid, data_dir) and time.monotonic() < deadline:
            time.sleep(0.05)
    (data_dir / PID_FILE).unlink(missing_ok=True)
    return True


def _logs_tail(data_dir: Path, lines: int = 20) -> str:
    parts = []
    for path in (data_dir / OUT_FILE, data_dir / LOG_FILE):
        with suppress(OSError):
            tail = "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
            parts.append(f"--- {path} (last lines) ---\n{tail}" if tail else "")
    return "\n".join(p for p in parts if p) or f"(nothing logged in {data_dir})"


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _kafka_version(classpath: list[Path]) -> str:
    for match in (re.fullmatch(r"kafka_[\d.]+-(.+)\.jar", jar.name) for jar in classpath):
        if match:
            return match[1]
    raise SetupError("the resolved kafka jars hold no kafka_<scala>-<version>.jar: "
                     "check jvm/kafka/pom.xml, then run 'make setup'")


def _server_properties(data_dir: Path, host: str, port: int, controller_port: int,
                       retention_ms: int, retention_bytes: int) -> str:
    props = {
        "node.id": NODE_ID,
        "process.roles": "broker,controller",
        "controller.quorum.voters": f"{NODE_ID}@{host}:{controller_port}",
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": data_dir / LOG_DIRS,
        "num.partitions": 1,
        "offsets.topic.replication.factor": 1,
        "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1,
        "share.coordinator.state.topic.replication.factor": 1,
        "share.coordinator.state.topic.min.isr": 1,
        # one node: a few partitions for the internal topics instead of 50 each
        "offsets.topic.num.partitions": 4,
        "transaction.state.log.num.partitions": 4,
        "share.coordinator.state.topic.num.partitions": 4,
        "group.initial.rebalance.delay.ms": 0,
        "log.retention.ms": retention_ms,
        "log.retention.bytes": retention_bytes,
        # tests with a tiny retention.ms see it act within seconds (the first check would
        # otherwise wait 30 s after start)
        "log.retention.check.interval.ms": 5000,
        "log.initial.task.delay.ms": 1000,
        "log.cleaner.dedupe.buffer.size": 16 * 1024 * 1024,
        # a compacted topic's cleaner looks for work every second, not every 15 s: one node on
        # one machine, where the check costs nothing (the tests of compacted topics wait on it)
        "log.cleaner.backoff.ms": 1000,
        "auto.create.topics.enable": "true",
        "delete.topic.enable": "true",
    }
    return "".join(f"{key}={value}\n" for key, value in props.items())


def _cluster_id() -> str:
    """A random Kafka cluster id (a Uuid in URL-safe base64, as kafka-storage makes them)."""
    text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
    return _cluster_id() if text.startswith("-") else text


def _format_storage(java: str, classpath: str, data_dir: Path, config: Path,
                    log_config: Path) -> None:
    if (data_dir / LOG_DIRS / "meta.properties").is_file():
        return  # formatted before: keep the cluster id and all data
    command = [java, "-Xmx256m", *JVM_FLAGS, f"-Dlog4j2.configurationFile={log_config}",
               "-cp", classpath, "kafka.tools.StorageTool", "format", "-t", _cluster_id(),
               "-c", str(config), "--ignore-formatted"]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        failure = (result.stdout + result.stderr).strip()[-2000:] if result.returncode else ""
    except subprocess.TimeoutExpired:
        failure = "timed out after 120s"
    if failure:
        raise BrokerError(f"formatting the embedded broker's storage in {data_dir} failed: "
                          f"{failure}")


def _answers(bootstrap: str) -> bool:
    """Whether the broker answers a Kafka metadata request."""
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaConfigurationError, KafkaError

    # kafka-python 3 renamed api_version_auto_timeout_ms to bootstrap_timeout_ms
    timeouts = {key: 3000 for key in ("bootstrap_timeout_ms", "api_version_auto_timeout_ms")
                if key in KafkaAdminClient.DEFAULT_CONFIG}
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000,
                                 **timeouts)
        try:
            admin.list_topics()
        finally:
            admin.close()
    except KafkaConfigurationError:
        raise
    except (KafkaError, OSError):  # not ready yet
        return False
    return True


def _controller_port(data_dir: Path, host: str, port: int) -> int:
    """The controller port stored in the data dir if still free, else a new free one."""
    try:
        stored = int(json.loads((data_dir / STATE_FILE).read_text())["controller_port"])
    except (OSError, ValueError, KeyError, TypeError):
        stored = 0
    while not stored or stored == port or not _port_free(host, stored):
        with socket.socket() as s:
            s.bind((host, 0))
            stored = int(s.getsockname()[1])
    return stored


def start_embedded(data_dir: Path, host: str, port: int, *, heap: str = "512m",
                   retention_ms: int = 604800000, retention_bytes: int = -1,
                   wait_s: float = 60) -> EmbeddedBroker:
    """Start a detached single-node Kafka broker on ``host:port``; returns once it answers.

    Raises BrokerError if one already runs on ``data_dir``, ``port`` is taken or the broker does
    not answer within ``wait_s`` (with its log's tail); SetupError if jars or java are missing.
    """
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    running = _read_pid(data_dir)
    if running is not None:
        raise BrokerError(f"an embedded broker (pid {running}) already runs on {data_dir}")
    bootstrap = f"{host}:{port}"
    if not _port_free(host, port):
        raise BrokerError(f"cannot start the embedded broker on {bootstrap}: the port is in use "
                          "by another process")
    classpath = jars.classpath(jars.jars_home(), "kafka", jars.repo_root())
    version = _kafka_version(classpath)
    java = shutil.which("java")
    if java is None:
        raise SetupError("java is not installed: run 'make setup' (openjdk-17-jre-headless)")
    cp = os.pathsep.join(str(jar) for jar in classpath)

    controller_port = _controller_port(data_dir, host, port)
    _write_atomic(data_dir / STATE_FILE, json.dumps(
        {"controller_port": controller_port, "version": version}, indent=2) + "\n")
    config = data_dir / "server.properties"
    _write_atomic(config, _server_properties(data_dir, host, port, controller_port,
                                             retention_ms, retention_bytes))
    log_config = data_dir / "log4j2.properties"
    _write_atomic(log_config, LOG4J2.format(log=data_dir / LOG_FILE))
    _format_storage(java, cp, data_dir, config, log_config)

    command = [java, f"-Xmx{heap}", f"-Xms{heap}", *JVM_FLAGS,
               f"-Dlog4j2.configurationFile={log_config}", f"-Dkafka.logs.dir={data_dir}",
               "-cp", cp, "kafka.Kafka", str(config)]
    started = time.monotonic()
    with open(data_dir / OUT_FILE, "ab") as out:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True,
                                   cwd=data_dir)
    _children[process.pid] = process
    _write_atomic(data_dir / PID_FILE, f"{process.pid}\n")
    broker = EmbeddedBroker(data_dir=data_dir, host=host, port=port,
                            controller_port=controller_port, pid=process.pid, version=version)
    deadline = started + wait_s
    while True:
        code = process.poll()
        if code is not None:
            _children.pop(process.pid, None)
            (data_dir / PID_FILE).unlink(missing_ok=True)
            raise BrokerError(f"the embedded broker exited with code {code} while starting on "
                              f"{bootstrap}:\n{_logs_tail(data_dir)}")
        if is_up(bootstrap) and _answers(bootstrap):
            break
        if time.monotonic() > deadline:
            broker.stop(timeout_s=5)
            raise BrokerError(f"the embedded broker did not answer on {bootstrap} within "
                              f"{wait_s:.0f}s (stopped it):\n{_logs_tail(data_dir)}")
        time.sleep(0.1)
    log.info("embedded Kafka %s (pid %d) answers on %s after %.1fs, data in %s", version,
             process.pid, bootstrap, time.monotonic() - started, data_dir)
    return broker


@contextmanager
def _locked(data_dir: Path) -> Iterator[None]:
    """Serialize start/stop of one data dir across processes."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / "broker.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def start(settings: Settings, wait_s: float = 60.0) -> bool:
    """Start the embedded broker unless it already runs; returns True if it was started."""
    bootstrap = settings.broker.bootstrap_servers
    if not settings.broker.embedded:
        raise BrokerError(f"broker.embedded is false: sluice does not manage {bootstrap}")
    data_dir = settings.path(settings.broker.data_dir).resolve()
    with _locked(data_dir):
        pid = _read_pid(data_dir)
        if pid is not None:  # ours, maybe still starting: wait until it answers
            deadline = time.monotonic() + wait_s
            while not (is_up(bootstrap) and _answers(bootstrap)):
                if not _alive(pid, data_dir) or time.monotonic() > deadline:
                    raise BrokerError(f"the embedded broker (pid {pid}) does not answer on "
                                      f"{bootstrap}:\n{_logs_tail(data_dir)}")
                time.sleep(0.2)
            return False
        if is_up(bootstrap):
            log.warning("something not started from %s already listens on %s: using it",
                        data_dir, bootstrap)
            return False
        host, port = _host_port(bootstrap)
        start_embedded(data_dir, host, port, heap=settings.broker.heap,
                       retention_ms=settings.broker.retention_ms,
                       retention_bytes=settings.broker.retention_bytes,
                       wait_s=wait_s)
    return True


def stop(settings: Settings) -> bool:
    """Stop the embedded broker (its data stays on disk); returns True if one was running."""
    data_dir = settings.path(settings.broker.data_dir).resolve()
    if not data_dir.is_dir():
        return False
    with _locked(data_dir):
        return _stop_pid(data_dir, STOP_TIMEOUT_S)


def status(settings: Settings) -> BrokerStatus:
    """Whether the embedded broker of these settings runs, with its pid and Kafka version."""
    data_dir = settings.path(settings.broker.data_dir).resolve()
    pid = _read_pid(data_dir) if data_dir.is_dir() else None
    version: str | None = None
    with suppress(OSError, ValueError, KeyError, SetupError):  # version unknown: None
        version = (str(json.loads((data_dir / STATE_FILE).read_text())["version"]) if pid
                   else _kafka_version(jars.classpath(jars.jars_home(), "kafka",
                                                      jars.repo_root())))
    return BrokerStatus(running=pid is not None, pid=pid,
                        bootstrap=settings.broker.bootstrap_servers, data_dir=data_dir,
                        version=version)


def ensure_topic(bootstrap: str, topic: str, partitions: int,
                 configs: Mapping[str, str] | None = None) -> None:
    """Create ``topic`` (with topic ``configs``) if missing; return once all have leaders
    (kafka/client.py; here too for the callers that know it here)."""
    from python_ingest.kafka.client import ensure_topic as ensure

    ensure(bootstrap, topic, partitions, configs)
