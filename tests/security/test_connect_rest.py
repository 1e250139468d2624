"""Kafka Connect's REST API over HTTPS (issue #61): a real standalone Connect worker (the
project's pinned jars, on the session's plain broker) whose REST listener is https with a key
store of the tests' CA; sluice's client (runtime/connect_rest.py, ``sluice debezium status``)
trusts it by ``kafka_connect.ca_file`` and refuses it, naming that setting, without.

Basic auth: Connect's own BasicAuthSecurityRestExtension is not among the pinned jars, so the
login is checked by a small TLS gateway in front of the real worker (as a company's proxy
does), which forwards to the worker's https listener."""

from __future__ import annotations

import base64
import http.client
import ssl
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from python_ingest.cli.debezium import cmd_debezium_status
from python_ingest.config import load_settings
from python_ingest.exceptions import ConfigError
from python_ingest.runtime import connect
from python_ingest.runtime.connect_rest import ConnectRest, ConnectRestError
from tests.conftest import write_config
from tests.security.conftest import secret_file
from tests.security.gateway import tls_gateway
from tests.security.pki import Pki

pytestmark = pytest.mark.secure

STORE_PASSWORD = "store-pw-41d"  # noqa: S105 - the test key store's
USER, PASSWORD = "sluice", "connect-pw-6f0"


@pytest.fixture(scope="module")
def https_worker(tmp_path_factory: pytest.TempPathFactory, broker: str, pki: Pki
                 ) -> Iterator[connect.ConnectWorker]:
    folder = tmp_path_factory.mktemp("connect-https")
    store = folder / "rest.p12"
    subprocess.run(["openssl", "pkcs12", "-export", "-in", str(pki.server_cert), "-inkey",
                    str(pki.server_key), "-out", str(store), "-passout",
                    f"pass:{STORE_PASSWORD}"], check=True, capture_output=True, timeout=60)
    worker = connect.start_standalone(
        folder / "worker", broker, [], heap="256m",
        https={"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(store),
               "ssl.keystore.password": STORE_PASSWORD, "ssl.key.password": STORE_PASSWORD},
        client={"ca_file": str(pki.ca)})
    yield worker
    worker.stop()


@pytest.fixture(scope="module")
def gateway(https_worker: connect.ConnectWorker, pki: Pki) -> Iterator[str]:
    """https://127.0.0.1:<port> checking basic auth, forwarding to the worker over https."""
    allowed = {f"Basic {base64.b64encode(f'{USER}:{PASSWORD}'.encode()).decode()}"}
    with tls_gateway(pki, https_worker.rest, allowed,
                     ssl.create_default_context(cafile=str(pki.ca))) as url:
        yield url


def settings_with(tmp_path: Path, workdir: Path, broker: str, env: dict[str, str] | None = None,
                  **connect_raw: Any) -> Any:
    path = write_config(tmp_path / "sluice.yml", workdir, broker, {}, kafka_connect=connect_raw)
    return load_settings(path, env=env or {})


def test_the_worker_answers_over_https_with_the_ca(
        https_worker: connect.ConnectWorker, pki: Pki, tmp_path: Path, workdir: Path,
        broker: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert https_worker.rest.startswith("https://")
    with pytest.raises((OSError, http.client.HTTPException)):  # a TLS listener: no plain http
        urllib.request.urlopen(https_worker.rest.replace("https:", "http:"), timeout=5)
    assert "version" in https_worker.client.get("/")
    # `sluice debezium status` by config: the url from SLUICE_KAFKA_CONNECT_URL
    settings = settings_with(tmp_path, workdir, broker, {"SLUICE_KAFKA_CONNECT_URL":
                                                         https_worker.rest},
                             url="http://elsewhere:8083", ca_file=str(pki.ca))
    assert settings.kafka_connect.url == https_worker.rest
    assert cmd_debezium_status(settings) == 0
    assert f"0 connector(s) at {https_worker.rest}" in capsys.readouterr().out


def test_an_untrusted_worker_certificate_is_refused_naming_ca_file(
        https_worker: connect.ConnectWorker, pki: Pki) -> None:
    for ca in (str(pki.other_ca), None):  # another CA; the system's CAs
        with pytest.raises(ConnectRestError) as caught:
            ConnectRest(https_worker.rest, ca_file=ca, timeout_s=5).connectors()
        assert "kafka_connect.ca_file" in str(caught.value) and "not trusted" in str(caught.value)
        assert caught.value.retry is False


def test_basic_auth_in_front_of_the_worker(gateway: str, pki: Pki, tmp_path: Path,
                                           workdir: Path, broker: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    pw = secret_file(tmp_path, "connect.pw", PASSWORD)
    settings = settings_with(tmp_path, workdir, broker, url=gateway, ca_file=str(pki.ca),
                             user=USER, password_file=pw)
    assert cmd_debezium_status(settings) == 0
    monkeypatch.setenv("SLUICE_KAFKA_CONNECT_PASSWORD", "nope-9")  # over password_file
    wrong = settings_with(tmp_path, workdir, broker, {"SLUICE_KAFKA_CONNECT_PASSWORD": "nope-9"},
                          url=gateway, ca_file=str(pki.ca), user=USER, password_file=pw)
    with pytest.raises(ConnectRestError) as caught:
        cmd_debezium_status(wrong)
    message = str(caught.value)
    assert "401" in message and "kafka_connect.user" in message and "password_env" in message
    client = ConnectRest.of(settings.kafka_connect)
    for text in (message, repr(settings), repr(wrong), repr(client)):
        assert PASSWORD not in text and "nope-9" not in text


def test_bad_kafka_connect_settings_fail_at_load(tmp_path: Path, workdir: Path,
                                                 broker: str) -> None:
    with pytest.raises(ConfigError, match=r"kafka_connect\.ca_file"):
        settings_with(tmp_path, workdir, broker, url="https://c:8443",
                      ca_file=str(tmp_path / "none.pem"))
    with pytest.raises(ConfigError, match=r"kafka_connect\.url"):
        settings_with(tmp_path, workdir, broker, url="c:8443")
    with pytest.raises(ConfigError, match=r"kafka_connect\.pasword"):
        settings_with(tmp_path, workdir, broker, url="https://c:8443", pasword="x")
