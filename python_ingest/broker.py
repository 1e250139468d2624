"""The embedded Kafka-protocol broker: noida-db, persistent, on a private port.

Used when ``broker.embedded`` is true (the default); production points
``broker.bootstrap_servers`` at a real cluster and never starts anything.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import time
from pathlib import Path

from python_ingest.config import Settings
from python_ingest.exceptions import BrokerError, SetupError

log = logging.getLogger(__name__)


def _binary() -> Path:
    try:
        import noida_db
    except ImportError as exc:
        raise SetupError("the embedded broker needs the package noida-db: "
                         "run 'make setup'") from exc
    binary = Path(noida_db.__file__).parent / "noida-db"
    if not binary.is_file():
        raise SetupError(f"noida-db binary missing at {binary}: reinstall with 'make setup'")
    os.chmod(binary, 0o755)
    return binary


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


def _run(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    data_dir = settings.path(settings.broker.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    return subprocess.run([str(_binary()), *args, "--data-dir", str(data_dir)],
                          capture_output=True, text=True, check=False, timeout=60)


def start(settings: Settings, wait_s: float = 20.0) -> bool:
    """Start the embedded broker unless it already runs; returns True if it was started."""
    bootstrap = settings.broker.bootstrap_servers
    if not settings.broker.embedded:
        raise BrokerError(f"broker.embedded is false: sluice does not manage {bootstrap}")
    if is_up(bootstrap):
        return False
    host, port = _host_port(bootstrap)
    result = _run(settings, "up", "--only", "kafka", "--host", host, "--kafka-port", str(port))
    deadline = time.monotonic() + wait_s
    while not is_up(bootstrap):
        if time.monotonic() > deadline:
            raise BrokerError(f"the embedded broker did not come up on {bootstrap} within "
                              f"{wait_s:.0f}s: {result.stdout.strip()} {result.stderr.strip()} "
                              f"(log: {settings.path(settings.broker.data_dir) / 'noida.log'})")
        time.sleep(0.1)
    log.info("embedded broker (noida-db) listening on %s, data in %s", bootstrap,
             settings.broker.data_dir)
    return True


def stop(settings: Settings) -> bool:
    """Stop the embedded broker (its data stays on disk); returns True if one was running."""
    if not is_up(settings.broker.bootstrap_servers):
        return False
    _run(settings, "down")
    deadline = time.monotonic() + 10
    while is_up(settings.broker.bootstrap_servers) and time.monotonic() < deadline:
        time.sleep(0.1)
    return True


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create ``topic`` with ``partitions`` partitions if it does not exist."""
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        if topic in admin.list_topics():
            return
        admin.create_topics([NewTopic(topic, partitions, 1)])
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()
