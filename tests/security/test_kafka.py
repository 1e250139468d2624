"""The whole way over secured connections (issue #61): MariaDB (TLS only, its user REQUIRE
SSL) → tap (SCRAM-SHA-512 user that may only write its own topics) → Kafka over SASL_SSL →
pipeline (SCRAM-SHA-256 user that may only read its jobs' topics) → lake, equal to the source;
then each refusal (wrong password, untrusted certificate, missing ACL) stops the component
with a message naming it, the setting and what to do, moves no data and shows no secret.

One secured broker and one TLS-only MariaDB for the module (conftest.py).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from python_ingest.exceptions import BrokerError
from python_ingest.steps.pipeline import run_all
from python_ingest.tables.runs import flush_records
from tests.security.conftest import secret_file, source_tls
from tests.security.kafka_server import CLIENT_PRINCIPAL, PLAIN_USERS, USERS, SecureBroker
from tests.security.pki import KEY_PASSWORD, Pki
from tests.sources.binlog.lake import assert_lake_equals_source, make_project
from tests.sources.binlog.lake import scaffold as write_scaffold
from tests.sources.binlog.support import TapEnv

pytestmark = pytest.mark.secure

DATABASE = "shopsec"
TAP_PASSWORD_ENV = "SLUICE_TEST_TAP_KAFKA_PASSWORD"
SECRETS = [p for _, p in USERS.values()] + list(PLAIN_USERS.values()) + [KEY_PASSWORD, "wr0ng-pw"]


@dataclass
class SecureTapEnv(TapEnv):
    """A TapEnv whose sluice.yml gives the project's broker the jobs' user and the source
    its own user on the same cluster (``sources.<name>.broker.security``)."""

    broker_security: dict[str, Any] = field(default_factory=dict)
    tap_security: dict[str, Any] = field(default_factory=dict)
    kafka: SecureBroker | None = None

    def write_config(self, **source_overrides: Any) -> Path:
        path = super().write_config(**source_overrides)
        config = yaml.safe_load(path.read_text())
        config["broker"]["security"] = self.broker_security
        config["sources"][self.source]["broker"] = {"security": self.tap_security}
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path


def end_offsets(broker: SecureBroker, topic: str) -> dict[int, int]:
    """A topic's end offsets, read as the broker's super user ({} when it does not exist)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.internal, "group.id": "sec-test"})
    try:
        metadata = consumer.list_topics(timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return {}
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in metadata.partitions}
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory, workdir: Path, secure_broker: SecureBroker,
         tls_mariadb: Any, pki: Pki) -> Iterator[SecureTapEnv]:
    """The source's table, its scaffolded jobs and models, the ACLs (the tap's user: its own
    topics by prefix; the jobs' user: read its jobs' topics), the tap started at the end."""
    tmp = tmp_path_factory.mktemp("secure-shop")
    os.environ[TAP_PASSWORD_ENV] = USERS["tap"][1]
    with tls_mariadb.root() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {DATABASE}")
    env = SecureTapEnv(tmp, workdir, secure_broker.sasl_ssl, tls_mariadb, DATABASE,
                       source_overrides=source_tls(pki),
                       broker_security={"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256",
                                        "user": "job", "ca_file": str(pki.ca),
                                        "password_file": secret_file(tmp, "job.pw",
                                                                     USERS["job"][1])},
                       tap_security={"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                                     "user": "tap", "password_env": TAP_PASSWORD_ENV,
                                     "ca_file": str(pki.ca)}, kafka=secure_broker)
    secure_broker.allow("User:tap", "TOPIC", env.source, ("WRITE", "CREATE", "DESCRIBE",
                                                          "DESCRIBE_CONFIGS"), prefixed=True)
    make_project(tmp)
    env.sql("CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40), qty INT NOT NULL)")
    write_scaffold(env)  # connects to the source over TLS (verify-full)
    for job in env.jobs.values():
        secure_broker.allow("User:job", "TOPIC", job["topic"], ("READ", "DESCRIBE"))
    env.tap_until_end()  # the tap's start: the binlog's end
    yield env
    os.environ.pop(TAP_PASSWORD_ENV, None)
    env.close()


def secrets_absent(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, f"a secret shows: ...{text[:200]}..."


def test_tap_to_lake_over_sasl_ssl_and_tls_ends_equal(shop: SecureTapEnv, spark: Any,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    for chatty in ("python_ingest", "kafka.admin", "kafka.consumer"):  # configs at DEBUG
        caplog.set_level(logging.DEBUG, chatty)
    shop.sql(*(f"INSERT INTO items VALUES ({i}, 'item {i}', {i * 3})" for i in range(1, 41)),
             "UPDATE items SET qty = qty + 1 WHERE id % 3 = 0",
             "DELETE FROM items WHERE id % 7 = 0")
    tap = shop.tap_until_end()
    assert tap.stats.row_changes >= 40 + 13 + 5
    items = next(n for n, j in shop.jobs.items() if j["topic"] == shop.topic("items"))
    (result,) = run_all(spark, shop.settings(), [items])
    assert result.counts["read"] >= 58
    assert assert_lake_equals_source(spark, shop, "items") == 40 - 5
    settings = shop.settings()
    status = Path(settings.path(settings.state_dir), "status.json")
    flush_records()  # the records this process holds (tests/conftest.py)
    runs = spark.sql("select * from meta.runs").collect()
    secrets_absent(caplog.text, repr(settings), status.read_text() if status.is_file() else "",
                   str(runs))


def _refused_tap(shop: SecureTapEnv, **tap_security: Any) -> BrokerError:
    """Run the tap with ``tap_security`` over its own after a change: it must fail, with no
    message published and its checkpoint where it was; then the source's own settings again."""
    topic = shop.topic("items")
    before, checkpoint = end_offsets_of(shop, topic), shop.checkpoint()
    saved = dict(shop.tap_security)
    shop.tap_security.update(tap_security)
    shop.write_config()
    try:
        shop.sql("UPDATE items SET qty = qty + 100 WHERE id = 1")
        with pytest.raises(BrokerError) as caught:
            shop.tap_until_end()
    finally:
        shop.tap_security.clear()
        shop.tap_security.update(saved)
        shop.write_config()
    assert end_offsets_of(shop, topic) == before and shop.checkpoint() == checkpoint
    message = str(caught.value)
    secrets_absent(message, repr(caught.value.__cause__ or ""))
    assert "docs/security.md" in message and "Nothing was moved" in message
    return caught.value


def end_offsets_of(shop: SecureTapEnv, topic: str) -> dict[int, int]:
    assert shop.kafka is not None
    return end_offsets(shop.kafka, topic)


def test_wrong_password_stops_the_tap_naming_the_setting(shop: SecureTapEnv, tmp_path: Path
                                                         ) -> None:
    os.environ["SLUICE_TEST_WRONG"] = "wr0ng-pw"
    try:
        error = _refused_tap(shop, password_env="SLUICE_TEST_WRONG")
    finally:
        os.environ.pop("SLUICE_TEST_WRONG")
    message = str(error)
    assert f"sources.{shop.source}.broker.security.password_env" in message
    assert "login of user 'tap'" in message and "SCRAM-SHA-512" in message


def test_untrusted_certificate_stops_the_tap_naming_ca_file(shop: SecureTapEnv, pki: Pki
                                                            ) -> None:
    error = _refused_tap(shop, ca_file=str(pki.other_ca))
    assert f"sources.{shop.source}.broker.security.ca_file" in str(error)
    assert "not trusted" in str(error)


def test_tap_user_may_not_create_other_topics(shop: SecureTapEnv,
                                              secure_broker: SecureBroker) -> None:
    """The tap's user writes only topics of its prefix: another prefix is refused, named."""
    shop.write_config(topic_prefix="stolen")
    try:
        shop.sql("UPDATE items SET qty = qty + 1 WHERE id = 2")
        with pytest.raises(BrokerError) as caught:
            shop.tap_until_end()
    finally:
        shop.source_overrides.pop("topic_prefix")
        shop.write_config()
    message = str(caught.value)
    assert "user 'tap' is not allowed" in message and "stolen." in message, message
    assert "docs/security.md" in message
    assert not end_offsets(secure_broker, f"stolen.{DATABASE}.items")


def test_job_user_may_read_only_its_topics(shop: SecureTapEnv, spark: Any,
                                           secure_broker: SecureBroker) -> None:
    """A job on a topic its user has no ACL for fails at planning, names the user, the topic
    and the fix, writes no raw row and records a run that shows no secret."""
    from python_ingest.tables.runs import last_runs

    secure_broker.create_topic("payroll.salaries")
    name = next(n for n, j in shop.jobs.items() if j["topic"] == shop.topic("items"))
    raw_rows = raw_count(spark, name)
    shop.jobs[name]["topic"] = "payroll.salaries"  # the same job, now on a topic not its own
    shop.write_config()
    try:
        with pytest.raises(BrokerError) as caught:
            run_all(spark, shop.settings(), [name])
    finally:
        shop.jobs[name]["topic"] = shop.topic("items")
        shop.write_config()
    message = str(caught.value)
    assert "user 'job' is not allowed" in message and "payroll.salaries" in message, message
    assert "broker.security.user" in message and "docs/security.md" in message
    assert raw_count(spark, name) == raw_rows
    runs = last_runs(spark, name)
    assert runs and runs[0]["outcome"] != "success" and "payroll.salaries" in runs[0]["error"]
    secrets_absent(message, str(runs))


def raw_count(spark: Any, job: str) -> int:
    exists = spark.catalog.tableExists(f"raw.{job}")
    return int(spark.table(f"raw.{job}").count()) if exists else 0


@pytest.mark.parametrize("reader", ["kafka-python", "confluent-kafka"])
@pytest.mark.parametrize("login", ["mtls", "plain"])
def test_both_readers_over_mutual_tls_and_sasl_plain(login: str, reader: str, pki: Pki,
                                                     secure_broker: SecureBroker) -> None:
    """Mutual TLS (client certificate, its key encrypted) on the SSL listener and SASL PLAIN
    on the SASL_SSL one: the producer of the tap and both readers read exactly the range."""
    from python_ingest.config.kafka import KafkaServers, parse_security
    from python_ingest.kafka import client
    from python_ingest.sources.tap.producer import ChangelogProducer

    topic = f"secure.{login}.{reader}"
    secure_broker.create_topic(topic)
    if login == "mtls":
        principal, address = CLIENT_PRINCIPAL, secure_broker.ssl
        raw = {"protocol": "SSL", "ca_file": str(pki.ca), "cert_file": str(pki.client_cert),
               "key_file": str(pki.client_key), "key_password_env": "SLUICE_TEST_KEY_PW"}
    else:
        principal, address = "User:plainjob", secure_broker.sasl_ssl
        raw = {"protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "user": "plainjob",
               "password_env": "SLUICE_TEST_PLAIN_PW", "ca_file": str(pki.ca)}
    secure_broker.allow(principal, "TOPIC", topic, ("WRITE", "READ", "DESCRIBE"))
    if reader == "confluent-kafka":  # librdkafka looks its group's coordinator up
        secure_broker.allow(principal, "GROUP", client.CONFLUENT_GROUP, ("READ",))
    os.environ.update(SLUICE_TEST_KEY_PW=KEY_PASSWORD,
                      SLUICE_TEST_PLAIN_PW=PLAIN_USERS["plainjob"])
    servers = KafkaServers(address, parse_security(raw, "broker.security", Path("/")))
    producer = ChangelogProducer(servers)
    for i in range(25):
        producer.send(topic, f"k{i}".encode(), f"v{i}".encode())
    producer.flush(30)
    (offsets,) = client.partition_offsets(servers, topic)
    assert (offsets.earliest, offsets.end) == (0, 25)
    read = list(client.read_range(reader, servers, topic, 0, 5, 20, timeout_s=20))
    assert [m.value for m in read] == [f"v{i}".encode() for i in range(5, 20)]
