"""A secured Apache Kafka broker for the tests (one KRaft node, the project's pinned jars).

Listeners: SASL_SSL (SCRAM-SHA-256/512 users made by ``kafka-storage format --add-scram``,
PLAIN users from the JAAS line), SSL with client certificates required (mutual TLS; the
principal is the certificate's subject), and INTERNAL, a plaintext loopback listener whose
anonymous principal is a super user: the broker's own traffic and the tests' set-up (topics,
ACLs) only. The StandardAuthorizer denies whatever no ACL allows.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from python_ingest.runtime import jars
from tests.security.pki import Pki

USERS = {  # user: (mechanism, password)
    "admin": ("SCRAM-SHA-512", "admin-secret-4f1"),
    "tap": ("SCRAM-SHA-512", "tap-secret-9c2"),
    "job": ("SCRAM-SHA-256", "job-secret-7d3"),
    "dispersal": ("SCRAM-SHA-512", "disp-secret-2b8"),
}
PLAIN_USERS = {"plainjob": "plain-secret-5e6"}
CLIENT_PRINCIPAL = "User:CN=sluice-client"


def _ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports (held open together while picked)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass
class SecureBroker:
    folder: Path
    process: subprocess.Popen[bytes]
    sasl_ssl: str
    ssl: str
    internal: str

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def log(self) -> str:
        return broker_log(self.folder)

    def allow(self, principal: str, resource: str, name: str, operations: Iterable[str],
              prefixed: bool = False) -> None:
        """Add ALLOW ACLs for ``principal`` on a ``resource`` (TOPIC, GROUP)."""
        from confluent_kafka.admin import (
            AclBinding,
            AclOperation,
            AclPermissionType,
            AdminClient,
            ResourcePatternType,
            ResourceType,
        )

        admin = AdminClient({"bootstrap.servers": self.internal})
        bindings = [AclBinding(ResourceType[resource], name,
                               ResourcePatternType.PREFIXED if prefixed
                               else ResourcePatternType.LITERAL, principal, "*",
                               AclOperation[op], AclPermissionType.ALLOW)
                    for op in operations]
        for future in admin.create_acls(bindings).values():
            future.result(30)

    def create_topic(self, topic: str, partitions: int = 1) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.internal})
        for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
            future.result(30)


def _properties(folder: Path, pki: Pki, ports: dict[str, int]) -> str:
    jaas_plain = " ".join(f'user_{u}="{p}"' for u, p in PLAIN_USERS.items())
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    props = {
        "node.id": 1,
        "process.roles": "broker,controller",
        "controller.quorum.voters": f"1@127.0.0.1:{ports['CONTROLLER']}",
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "advertised.listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in
                                         ports.items() if name != "CONTROLLER"),
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,SSL:SSL,INTERNAL:PLAINTEXT,"
                                          "CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "controller.listener.names": "CONTROLLER",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": scram,
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram,
        "listener.name.sasl_ssl.plain.sasl.jaas.config":
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {jaas_plain};",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": pki.server_pem,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": pki.ca,
        "listener.name.ssl.ssl.client.auth": "required",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS;User:admin",
        "allow.everyone.if.no.acl.found": "false",
        "log.dirs": folder / "kafka",
        "num.partitions": 1,
        "auto.create.topics.enable": "false",
        "offsets.topic.replication.factor": 1,
        "offsets.topic.num.partitions": 2,
        "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1,
        "transaction.state.log.num.partitions": 2,
        "share.coordinator.state.topic.replication.factor": 1,
        "share.coordinator.state.topic.min.isr": 1,
        "share.coordinator.state.topic.num.partitions": 2,
        "group.initial.rebalance.delay.ms": 0,
    }
    return "".join(f"{k}={v}\n" for k, v in props.items())


def broker_log(folder: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in folder.glob("broker.*") if p.is_file())


def start_secure_broker(folder: Path, pki: Pki) -> SecureBroker:
    """Format and start the broker in ``folder``; returns once the INTERNAL listener answers."""
    folder.mkdir(parents=True, exist_ok=True)
    ports = dict(zip(("SASL_SSL", "SSL", "INTERNAL", "CONTROLLER"), _ports(4), strict=True))
    config = folder / "server.properties"
    config.write_text(_properties(folder, pki, ports))
    log4j = folder / "log4j2.properties"
    log4j.write_text("status = warn\nappender.f.type = File\nappender.f.name = f\n"
                     f"appender.f.fileName = {folder / 'broker.log'}\n"
                     "appender.f.layout.type = PatternLayout\n"
                     "appender.f.layout.pattern = [%d] %p %m (%c)%n\n"
                     "rootLogger.level = WARN\nrootLogger.appenderRef.f.ref = f\n")
    classpath = os.pathsep.join(str(j) for j in jars.classpath(jars.jars_home(), "kafka",
                                                                jars.repo_root()))
    java = shutil.which("java") or "java"
    base = [java, "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath]
    cluster = "-"
    while cluster.startswith("-"):  # as kafka-storage makes them (a leading '-' is an option)
        cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
    scram = [arg for user, (mechanism, password) in USERS.items()
             for arg in ("--add-scram", f"{mechanism}=[name={user},password={password}]")]
    formatted = subprocess.run([*base, "kafka.tools.StorageTool", "format", "-t", cluster, "-c",
                                str(config), *scram], capture_output=True, text=True,
                               timeout=120)
    if formatted.returncode:
        raise RuntimeError(f"formatting the secured broker failed:\n{formatted.stdout[-2000:]}"
                           f"{formatted.stderr[-2000:]}\n{broker_log(folder)[-2000:]}")
    with open(folder / "broker.out", "ab") as out:
        process = subprocess.Popen([*base, "kafka.Kafka", str(config)], stdout=out,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    broker = SecureBroker(folder, process, f"127.0.0.1:{ports['SASL_SSL']}",
                          f"127.0.0.1:{ports['SSL']}", f"127.0.0.1:{ports['INTERNAL']}")
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + 90
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"the secured broker exited:\n{broker.log()[-3000:]}")
        try:
            socket.create_connection(("127.0.0.1", ports["INTERNAL"]), timeout=1).close()
            AdminClient({"bootstrap.servers": broker.internal}).list_topics(timeout=5)
            break
        except Exception:
            if time.monotonic() > deadline:
                broker.stop()
                raise RuntimeError("the secured broker did not answer:\n"
                                   f"{broker.log()[-3000:]}") from None
            time.sleep(0.3)
    return broker
