"""Fixtures of the secured-connection tests (issue #61): a private CA (pki.py), a Kafka broker
with SASL_SSL, mutual TLS and ACLs (kafka_server.py, one per session), and a MariaDB that
takes TLS connections only. Everything is started here, on loopback ports, and stopped at the
end; certificates and keys live in a temporary folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from python_ingest.sources.binlog.server import LocalServer
from tests.security.kafka_server import SecureBroker, start_secure_broker
from tests.security.pki import Pki, make_pki
from tests.servers import require_mariadb


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")  # one for every module (test_kafka.py, test_job_cluster.py)
def secure_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[SecureBroker]:
    broker = start_secure_broker(tmp_path_factory.mktemp("secure-broker"), pki)
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def tls_mariadb(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[LocalServer]:
    """A private mariadbd with ``require_secure_transport=ON`` whose tap user is created
    ``REQUIRE SSL`` (the root user of the tests connects by the server's socket)."""
    require_mariadb()
    server = LocalServer(tmp_path_factory.mktemp("tls-mariadb")).start(extra=[
        f"--ssl-ca={pki.ca}", f"--ssl-cert={pki.server_cert}", f"--ssl-key={pki.server_key}",
        "--require-secure-transport=ON"])
    with server.root() as conn, conn.cursor() as cur:
        cur.execute(f"ALTER USER '{server.tap_user}'@'127.0.0.1' REQUIRE SSL")
    yield server
    server.stop()


def source_tls(pki: Pki, mode: str = "verify-full") -> dict[str, str]:
    return {"sslmode": mode, "sslrootcert": str(pki.ca)}


def secret_file(folder: Path, name: str, value: str) -> str:
    path = folder / name
    path.write_text(value + "\n")
    path.chmod(0o600)
    return str(path)
