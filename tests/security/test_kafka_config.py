"""Kafka security settings (config/kafka.py) and their one mapping to every client
(kafka/security.py): read from sluice.yml and the environment, validated naming the field,
never shown, and handed on with the bootstrap list (into Spark tasks too). No server."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
import yaml

from python_ingest.config import load_settings
from python_ingest.config.kafka import KafkaServers
from python_ingest.exceptions import ConfigError
from python_ingest.kafka import security

pytestmark = pytest.mark.secure

PASSWORD = "k4fka-pw-e9"


def settings(tmp_path: Path, broker: dict[str, Any], env: dict[str, str] | None = None,
             **extra: Any) -> Any:
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    (tmp_path / "client.pem").write_text("cert\n")
    (tmp_path / "client.key").write_text("key\n")
    path = tmp_path / "sluice.yml"
    path.write_text(yaml.safe_dump({"broker": broker, **extra}))
    return load_settings(path, env=env or {})


def test_embedded_default_is_plaintext_with_nothing_added(tmp_path: Path) -> None:
    servers = settings(tmp_path, {}).broker.bootstrap_servers
    assert servers == "127.0.0.1:19092" and servers.security.protocol == "PLAINTEXT"
    assert security.kafka_python(servers, "test") == {"bootstrap_servers": "127.0.0.1:19092"}
    assert security.librdkafka(servers)["bootstrap.servers"] == "127.0.0.1:19092"
    assert not any(k.startswith(("ssl", "sasl", "security")) for k in security.librdkafka(servers))


def test_sasl_ssl_with_mtls_reaches_every_client_and_never_shows(tmp_path: Path) -> None:
    broker = {"bootstrap_servers": "b1:9096,b2:9096", "security": {
        "protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256", "user": "sluice",
        "password_env": "KAFKA_PW", "ca_file": "ca.pem", "cert_file": "client.pem",
        "key_file": "client.key"}}
    loaded = settings(tmp_path, broker, env={})
    servers = loaded.broker.bootstrap_servers
    env = {"KAFKA_PW": PASSWORD}
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        python = security.kafka_python(servers, None, request_timeout_ms=1)  # no login
        rdkafka = security.librdkafka(servers)
        java = security.java_client(servers)
    ca = str(tmp_path / "ca.pem")
    assert python == {"bootstrap_servers": "b1:9096,b2:9096", "security_protocol": "SASL_SSL",
                      "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "sluice",
                      "sasl_plain_password": PASSWORD, "ssl_check_hostname": True,
                      "ssl_cafile": ca, "ssl_certfile": str(tmp_path / "client.pem"),
                      "ssl_keyfile": str(tmp_path / "client.key"), "request_timeout_ms": 1}
    assert rdkafka["security.protocol"] == "SASL_SSL" and rdkafka["ssl.ca.location"] == ca
    assert rdkafka["sasl.password"] == PASSWORD
    assert rdkafka["ssl.endpoint.identification.algorithm"] == "https"
    assert "ScramLoginModule required" in java["sasl.jaas.config"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KAFKA_PW", PASSWORD)
        worker = security.connect_worker(servers)
    assert worker["producer.sasl.jaas.config"] == worker["consumer.sasl.jaas.config"] == \
        java["sasl.jaas.config"] and worker["admin.security.protocol"] == "SASL_SSL"
    assert java["ssl.truststore.location"] == ca and java["ssl.keystore.key"] == "key\n"
    # shown nowhere: reprs, a client's logged configuration, the pickled servers
    assert PASSWORD not in repr(loaded) + repr(python) + repr(rdkafka)
    assert PASSWORD.encode() not in pickle.dumps(servers)
    again = pickle.loads(pickle.dumps(servers))
    assert isinstance(again, KafkaServers) and again.security == servers.security


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    env = {"SLUICE_BOOTSTRAP_SERVERS": "kafka:9093", "SLUICE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
           "SLUICE_KAFKA_SASL_MECHANISM": "PLAIN", "SLUICE_KAFKA_USER": "key-id",
           "SLUICE_KAFKA_PASSWORD": PASSWORD}
    servers = settings(tmp_path, {"security": {"protocol": "SSL"}}, env).broker.bootstrap_servers
    sec = servers.security
    assert (servers, sec.protocol, sec.sasl_mechanism, sec.user, sec.password_env) == \
        ("kafka:9093", "SASL_SSL", "PLAIN", "key-id", "SLUICE_KAFKA_PASSWORD")


def test_a_sources_own_user_on_the_projects_cluster(tmp_path: Path) -> None:
    from python_ingest.sources.tap.kinds import on_its_cluster

    tap_user = {"protocol": "SASL_SSL", "user": "tap", "password_env": "TAP_PW"}
    loaded = settings(tmp_path, {"bootstrap_servers": "k:9096", "security": {
        "protocol": "SASL_SSL", "user": "job", "password_env": "JOB_PW"}},
        sources={"shop": {"host": "db", "broker": {"security": tap_user}}})
    tapping = on_its_cluster(loaded, loaded.source("shop")).broker.bootstrap_servers
    assert tapping == "k:9096" and security.security_of(tapping).user == "tap"
    assert security.security_of(tapping).where == "sources.shop.broker.security"
    assert security.security_of(loaded.broker.bootstrap_servers).user == "job"


@pytest.mark.parametrize(("security_raw", "field"), [
    ({"protocol": "SASL_SSL", "password_env": "X"}, "broker.security.user"),
    ({"protocol": "SASL_SSL", "user": "u"}, "broker.security.password_env"),
    ({"protocol": "SASL_SSL", "user": "u", "password_env": "X", "sasl_mechanism": "GSSAPI"},
     "broker.security.sasl_mechanism"),
    ({"protocol": "TLS"}, "broker.security.protocol"),
    ({"protocol": "PLAINTEXT", "ca_file": "ca.pem"}, "broker.security.protocol"),
    ({"protocol": "SSL", "cert_file": "client.pem"}, "broker.security.key_file"),
    ({"protocol": "SSL", "ca_file": "missing.pem"}, "broker.security.ca_file"),
    ({"protocol": "SSL", "truststore": "x"}, "broker.security.truststore"),
])
def test_bad_settings_fail_naming_the_field(tmp_path: Path, security_raw: dict[str, Any],
                                            field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings(tmp_path, {"security": security_raw})
    assert caught.value.field == field, str(caught.value)
