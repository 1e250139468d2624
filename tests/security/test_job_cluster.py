"""A job's own Kafka cluster (issue #61): ``jobs.<name>.broker`` (bootstrap_servers and
security) over the project's ``broker:``. The project's broker here is the plain embedded one
of the test session; the job's topic lives on the secured broker (SASL_SSL, SCRAM-SHA-256 user
``job``, ACLs). Every client of the job (the planner, both readers in Spark tasks, the
runner's poll, ``sluice status``, the report's backlog) goes there; a wrong password in the
override stops the job naming ``jobs.<name>.broker.security``, lands nothing and shows no
secret; a bad override fails at load, naming the setting."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from python_ingest.config import load_settings
from python_ingest.demo import trips as demo
from python_ingest.exceptions import BrokerError, ConfigError
from python_ingest.kafka import client
from python_ingest.kafka.offsets import ClusterEnds
from python_ingest.steps.jobs import job_status, run_ingest
from python_ingest.tables.formats import table_exists
from python_ingest.tables.names import JobTables
from python_ingest.tables.runs import last_runs
from tests.conftest import REPO, trips_job, write_config
from tests.security.conftest import secret_file
from tests.security.kafka_server import USERS, SecureBroker
from tests.security.pki import Pki

pytestmark = pytest.mark.secure

PASSWORD_ENV = "SLUICE_TEST_JOB_CLUSTER_PW"
WRONG = "wr0ng-job-pw"
SECRETS = (USERS["job"][1], WRONG)


def job_broker(broker: SecureBroker, pki: Pki, **security: Any) -> dict[str, Any]:
    return {"bootstrap_servers": broker.sasl_ssl,
            "security": {"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256",
                         "user": "job", "password_env": PASSWORD_ENV, "ca_file": str(pki.ca),
                         **security}}


def produce(broker: SecureBroker, topic: str, count: int, seed: int) -> Counter[int]:
    """``count`` trips events on ``topic`` of the secured broker (as its super user); the
    ref keys of the events a job lands (the malformed ones go to its error table)."""
    broker.create_topic(topic, 2)
    gen = demo.TripsGenerator(demo.trips_schema(REPO), seed=seed, malformed_rate=0.0)
    events = list(gen.events(count))
    assert demo.produce(broker.internal, topic, iter(events)) == count
    return Counter(e.record["_ref_key"] for e in events if e.record)


def landed(spark: Any, job: str) -> Counter[int]:
    raw = JobTables(job).raw
    if not table_exists(spark, raw):
        return Counter()
    return Counter(r["_ref_key"] for r in spark.table(raw).select("_ref_key").collect())


def test_a_job_reads_its_topic_on_its_own_secured_cluster(
        spark: Any, broker: str, tmp_path: Path, workdir: Path, secure_broker: SecureBroker,
        pki: Pki, job_name: str) -> None:
    """The planner (kafka-python), the tasks' reader (librdkafka), the status, the runner's
    poll. The password by file: Spark's Python workers outlive a variable set in this
    process (a real deployment sets the variable before sluice starts, or mounts the file)."""
    topic = f"jobcluster.{job_name}"
    expected = produce(secure_broker, topic, 300, seed=61)
    secure_broker.allow("User:job", "TOPIC", topic, ("READ", "DESCRIBE"))
    secure_broker.allow("User:job", "GROUP", client.CONFLUENT_GROUP, ("READ",))
    pw = secret_file(tmp_path, "job.pw", USERS["job"][1])
    job = trips_job(topic, reader="confluent-kafka", broker=job_broker(secure_broker, pki,
                                                            password_env=None, password_file=pw))
    settings = load_settings(write_config(tmp_path / "sluice.yml", workdir, broker,
                                          {job_name: job}), env={})
    assert settings.broker.bootstrap_servers == broker  # the project's: plain, elsewhere
    result = run_ingest(spark, settings, settings.job(job_name))
    assert (result.read, result.landed, result.errors) == (300, 300, 0)
    assert landed(spark, job_name) == expected
    status = job_status(spark, settings, settings.job(job_name))  # `sluice status <job>`
    assert "broker_error" not in status and status["lag"] == 0
    # the runner's poll and `sluice status`: each job's end offsets on its own cluster
    ends = ClusterEnds(timeout_s=15)
    try:
        found = ends.end({job_name: (settings.kafka_for(settings.job(job_name)), topic),
                          "plain": (broker, topic)})
    finally:
        ends.close()
    assert sum(found[job_name].values()) == 300 and found["plain"] == {}
    secrets_absent(repr(settings), str(last_runs(spark, job_name)))


def test_a_wrong_override_password_stops_the_job_naming_it(
        spark: Any, broker: str, tmp_path: Path, workdir: Path, secure_broker: SecureBroker,
        pki: Pki, job_name: str) -> None:
    topic = f"jobcluster.{job_name}"
    produce(secure_broker, topic, 50, seed=62)
    secure_broker.allow("User:job", "TOPIC", topic, ("READ", "DESCRIBE"))
    os.environ[PASSWORD_ENV] = WRONG
    try:
        job = trips_job(topic, broker=job_broker(secure_broker, pki))
        settings = load_settings(write_config(tmp_path / "sluice.yml", workdir, broker,
                                              {job_name: job}), env={})
        with pytest.raises(BrokerError) as caught:
            run_ingest(spark, settings, settings.job(job_name))
    finally:
        os.environ.pop(PASSWORD_ENV, None)
    message = str(caught.value)
    assert f"jobs.{job_name}.broker.security.password_env" in message, message
    assert "login of user 'job'" in message and "Nothing was moved" in message
    assert landed(spark, job_name) == Counter()
    runs = last_runs(spark, job_name)
    assert runs and runs[0]["outcome"] == "failed"
    secrets_absent(message, str(runs), repr(settings))


def test_a_bad_override_fails_at_load_naming_the_setting(
        broker: str, tmp_path: Path, workdir: Path, secure_broker: SecureBroker,
        pki: Pki) -> None:
    def load(**security: Any) -> Any:
        job = trips_job("t", broker=job_broker(secure_broker, pki, **security))
        return load_settings(write_config(tmp_path / "sluice.yml", workdir, broker,
                                          {"j": job}), env={})

    with pytest.raises(ConfigError, match=r"jobs\.j\.broker\.security.*passwrd"):
        load(passwrd="x")
    with pytest.raises(ConfigError, match=r"jobs\.j\.broker\.security\.password_file"):
        load(password_env=None, password_file=str(tmp_path / "missing.pw"))
    with pytest.raises(ConfigError, match=r"jobs\.j\.broker\.security\.ca_file"):
        load(ca_file=str(tmp_path / "missing-ca.pem"))
    # a job's override with only its own user: the project's bootstrap list, its security
    pw = secret_file(tmp_path, "job.pw", USERS["job"][1])
    job = trips_job("t", broker={"security": {"protocol": "SASL_SSL", "user": "job",
                                              "sasl_mechanism": "SCRAM-SHA-256",
                                              "password_file": pw}})
    settings = load_settings(write_config(tmp_path / "sluice.yml", workdir, broker,
                                          {"j": job}), env={})
    servers = settings.kafka_for(settings.job("j"))
    assert str(servers) == broker and servers.security.user == "job"  # type: ignore[attr-defined]
    assert servers.security.where == "jobs.j.broker.security"  # type: ignore[attr-defined]
    secrets_absent(repr(settings), repr(servers.security))  # type: ignore[attr-defined]


def secrets_absent(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, f"a secret shows: ...{text[:200]}..."


def test_a_cluster_that_does_not_answer_leaves_the_other_clusters_jobs_polled(
        broker: str, secure_broker: SecureBroker) -> None:
    """The runner's poll (ClusterEnds): a job whose cluster is down is left out and its
    cluster's error reported, the other cluster's jobs still get their end offsets."""
    from tests.conftest import free_port

    topic = "jobcluster.poll"
    secure_broker.create_topic(topic)
    assert demo.produce(secure_broker.internal, topic, iter(
        demo.TripsGenerator(demo.trips_schema(REPO), seed=63).events(5))) == 5
    problems: list[str] = []
    ends = ClusterEnds(timeout_s=2)
    try:
        found = ends.end({"up": (secure_broker.internal, topic),
                          "down": (f"127.0.0.1:{free_port()}", topic)}, problems)
    finally:
        ends.close()
    assert sum(found["up"].values()) == 5 and "down" not in found
    assert len(problems) == 1 and "127.0.0.1" in problems[0], problems
