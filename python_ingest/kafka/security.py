"""The one place a cluster's security settings become each Kafka client's configuration.

sluice talks to Kafka through kafka-python (planning, offsets, admin, the Spark tasks' default
reader), confluent-kafka/librdkafka (the tap's producer, dispersal's producer, the fast reader)
and, where a JVM client does (a Kafka Connect worker), Java client properties. A bootstrap
list (``KafkaServers``, config/kafka.py) carries its cluster's ``KafkaSecurity``; a plain
text is PLAINTEXT. ``failure`` turns a client's refusal into a BrokerError that names the
component, the setting to look at and what to do, and never the secret.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from typing import Any, NamedTuple

from python_ingest.config.kafka import PLAINTEXT, KafkaSecurity
from python_ingest.config.secrets import redact
from python_ingest.exceptions import BrokerError

DOCS = "docs/security.md"


class Hidden(str):
    """A secret handed to a client: the text itself, but a repr of ``***``, so a client that
    logs its configuration (kafka-python's admin client does, at DEBUG) shows no secret."""

    def __repr__(self) -> str:
        return "'***'"


def _hidden(value: str | None) -> Hidden | None:
    return None if value is None else Hidden(value)


def security_of(servers: str) -> KafkaSecurity:
    """The security settings ``servers`` carries (PLAINTEXT for plain text)."""
    found = getattr(servers, "security", None)
    return found if isinstance(found, KafkaSecurity) else PLAINTEXT


LOG_LEVEL = 3  # librdkafka's log_level (syslog's): 3 errors, 4 warnings, 6 (its default) info


class _Keys(NamedTuple):
    """What a Python client calls each security setting in its configuration."""

    servers: str
    protocol: str
    mechanism: str
    user: str
    password: str
    ca_file: str
    cert_file: str
    key_file: str
    key_password: str


_LIBRDKAFKA = _Keys("bootstrap.servers", "security.protocol", "sasl.mechanism", "sasl.username",
                    "sasl.password", "ssl.ca.location", "ssl.certificate.location",
                    "ssl.key.location", "ssl.key.password")
_KAFKA_PYTHON = _Keys("bootstrap_servers", "security_protocol", "sasl_mechanism",
                      "sasl_plain_username", "sasl_plain_password", "ssl_cafile", "ssl_certfile",
                      "ssl_keyfile", "ssl_password")


def _python_client(servers: str, component: str | None,
                   keys: _Keys) -> tuple[KafkaSecurity, dict[str, Any]]:
    """What librdkafka and kafka-python both take for ``servers``, under their ``keys`` (a
    secured cluster checked first with a ``component``), and its security settings."""
    if component is not None:
        check(servers, component)
    sec = security_of(servers)
    out: dict[str, Any] = {keys.servers: str(servers)}
    if sec.protocol != "PLAINTEXT":
        out[keys.protocol] = sec.protocol
    if sec.sasl:
        out.update({keys.mechanism: sec.sasl_mechanism, keys.user: sec.user,
                    keys.password: Hidden(sec.secret())})
    if sec.tls:
        files = {keys.ca_file: sec.ca_file, keys.cert_file: sec.cert_file,
                 keys.key_file: sec.key_file, keys.key_password: _hidden(sec.key_secret())}
        out.update({k: v for k, v in files.items() if v})
    return sec, out


def librdkafka(servers: str, config: Mapping[str, Any] | None = None,
               component: str | None = None) -> dict[str, Any]:
    """A confluent-kafka Producer/Consumer/AdminClient configuration for ``servers``; with a
    ``component``, a secured cluster is checked first (``check``)."""
    sec, out = _python_client(servers, component, _LIBRDKAFKA)
    # librdkafka's own lines (``%4|...``: a retried PID, a broker still loading) at errors
    # only: what fails reaches sluice as an error or exception that says what to do
    out["log_level"] = LOG_LEVEL
    if sec.tls:
        out["ssl.endpoint.identification.algorithm"] = "https" if sec.check_hostname else "none"
    return {**out, **(config or {})}


def kafka_python(servers: str, component: str | None, **config: Any) -> dict[str, Any]:
    """Keyword arguments of a kafka-python KafkaConsumer/KafkaAdminClient for ``servers``,
    used by ``component``: a secured cluster is checked first (``check``; None: not)."""
    sec, out = _python_client(servers, component, _KAFKA_PYTHON)
    if sec.tls:
        out["ssl_check_hostname"] = sec.check_hostname
    return {**out, **config}


def java_client(servers: str) -> dict[str, str]:
    """Kafka Java client properties (a Connect worker's, also under its ``producer.`` and
    ``consumer.`` prefixes) for ``servers``: PEM files as Kafka reads them (KIP-651)."""
    sec = security_of(servers)
    out = {"bootstrap.servers": str(servers), "security.protocol": sec.protocol}
    if sec.sasl:
        module = ("org.apache.kafka.common.security.plain.PlainLoginModule"
                  if sec.sasl_mechanism == "PLAIN"
                  else "org.apache.kafka.common.security.scram.ScramLoginModule")
        out.update({"sasl.mechanism": str(sec.sasl_mechanism), "sasl.jaas.config":
                    f'{module} required username="{_jaas(sec.user or "")}" '
                    f'password="{_jaas(sec.secret())}";'})
    if sec.tls:
        out["ssl.endpoint.identification.algorithm"] = "https" if sec.check_hostname else ""
        if sec.ca_file:
            out.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": sec.ca_file})
        if sec.cert_file and sec.key_file:
            from pathlib import Path

            out.update({"ssl.keystore.type": "PEM",
                        "ssl.keystore.certificate.chain": Path(sec.cert_file).read_text(),
                        "ssl.keystore.key": Path(sec.key_file).read_text()})
            if (key_password := sec.key_secret()) is not None:
                out["ssl.key.password"] = key_password
    return out


def connect_worker(servers: str) -> dict[str, str]:
    """A Kafka Connect worker's properties for ``servers`` (``runtime.connect``'s ``worker``):
    the worker's own clients, and with the ``producer.``, ``consumer.`` and ``admin.``
    prefixes its connectors' (Kafka's Connect reads those apart)."""
    own = java_client(servers)
    return {**own, **{f"{prefix}.{key}": value for prefix in ("producer", "consumer", "admin")
                      for key, value in own.items() if key != "bootstrap.servers"}}


def _jaas(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


# What a client's message says, by kind of refusal (kafka-python, librdkafka, the broker)
_LOGIN = re.compile(r"authentication fail|sasl authentication|invalid credentials|"
                    r"saslauthenticat|illegal sasl|unsupported sasl mechanism", re.IGNORECASE)
_CERT = re.compile(r"certificate verify failed|certificate_verify_failed|ssl handshake|"
                   r"broker certificate could not be verified|self.signed|unknown ca|"
                   r"hostname mismatch|ssl: ", re.IGNORECASE)
_ACL = re.compile(r"authoriz|not authorized|access denied", re.IGNORECASE)


def kind_of(detail: str) -> str | None:
    """``login``, ``certificate`` or ``acl`` for a client's message about a refusal, else
    None (a plain outage: no security setting to blame)."""
    for kind, pattern in (("acl", _ACL), ("login", _LOGIN), ("certificate", _CERT)):
        if pattern.search(detail):
            return kind
    return None


def failure(servers: str, component: str, detail: str, *, action: str = "",
            resource: str = "", group: str = "") -> BrokerError:
    """A BrokerError for ``component`` (e.g. "the tap of source shop") that could not do
    ``action`` on ``resource`` at ``servers`` because of ``detail`` (a client's message):
    which setting to check and what to do, the secret masked."""
    sec = security_of(servers)
    where = sec.where
    kind = kind_of(detail)
    shown = redact(detail, *(_secrets(sec)))
    at = f"the Kafka cluster at {servers}"
    if kind == "login":
        fix = (f"{at} refused the SASL {sec.sasl_mechanism} login of user '{sec.user}': check "
               f"the password {where}.password_env / password_file gives (and that the user "
               f"exists for {sec.sasl_mechanism}), and {where}.sasl_mechanism"
               if sec.sasl else
               f"{at} wants a login: set {where}.protocol (SASL_SSL), sasl_mechanism, user and "
               "password_env")
    elif kind == "certificate":
        fix = (f"the TLS certificate of {at} is not trusted: set {where}.ca_file to the PEM "
               "bundle of the CA that signed it (or check that the host name in "
               f"bootstrap_servers is one the certificate names; {where}.check_hostname)"
               if sec.tls else
               f"{at} speaks TLS: set {where}.protocol to SSL or SASL_SSL, and ca_file")
    elif kind == "acl":
        if re.search(r"group authoriz", detail, re.IGNORECASE):
            action, resource = "use", f"consumer group '{group}'" if group else "its group"
        who = f"user '{sec.user}'" if sec.sasl else "this client's principal"
        what = f" to {action}" if action else ""
        on = f" {resource}" if resource else ""
        fix = (f"{who} is not allowed{what}{on} on {at}: grant the ACL the component needs "
               f"({DOCS} lists them), or use the user meant for it ({where}.user)")
    else:
        fix = f"cannot reach {at} ({where}.protocol is {sec.protocol}): is it running?"
    return BrokerError(f"{component}: {fix}. Nothing was moved. Client said: {shown} "
                       f"({DOCS})")


def is_security(detail: str) -> bool:
    """Whether a client's message is a refusal that no retry cures (login, certificate,
    ACL): the caller stops at once instead of waiting out its timeout."""
    return kind_of(detail) is not None


def _secrets(sec: KafkaSecurity) -> list[str]:
    found = []
    for reveal in (sec.secret if sec.sasl else None, sec.key_secret if sec.tls else None):
        if reveal is None:
            continue
        try:
            value = reveal()
        except Exception:  # an unset variable: nothing to mask
            continue
        if value:
            found.append(value)
    return found


def denied(servers: str, topic: str, timeout_s: float = 10.0) -> bool:
    """Whether a secured cluster refuses this client ``topic``'s metadata (an ACL missing),
    for a topic a client found no partitions of: absent, or not allowed to see? A listing
    of all topics leaves the refused ones out without a word; asking for it alone tells."""
    if security_of(servers).protocol == "PLAINTEXT":
        return False
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(librdkafka(servers, {"logger": _quiet()}))
    try:
        found = admin.list_topics(topic=topic, timeout=timeout_s).topics.get(topic)
    except ck.KafkaException:
        return False
    error = found.error if found is not None else None
    return error is not None and error.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED


def _quiet() -> logging.Logger:
    """Where librdkafka's own lines go while checking: nowhere (they repeat what its errors,
    turned into ``failure``, say)."""
    quiet = logging.getLogger(f"{__name__}.check")
    quiet.propagate = False
    if not quiet.handlers:
        quiet.addHandler(logging.NullHandler())
    return quiet


_checked: set[tuple[str, str]] = set()
CHECK_TIMEOUT_S = 15.0


def check(servers: str, component: str, timeout_s: float = CHECK_TIMEOUT_S) -> None:
    """Log in to a secured cluster once per process before the first client does, and raise
    ``failure`` for ``component`` when the certificate or the login is refused (librdkafka
    tells why at once; a client that retries would only time out). PLAINTEXT: nothing."""
    sec = security_of(servers)
    key = (str(servers), repr(sec))
    if sec.protocol == "PLAINTEXT" or key in _checked:
        return
    import confluent_kafka as ck

    errors: list[Any] = []
    producer = ck.Producer(librdkafka(servers, {"error_cb": errors.append,
                                                "logger": _quiet()}))
    deadline = time.monotonic() + timeout_s
    while True:  # short tries: a refused login or certificate stops it at once
        try:
            producer.list_topics(timeout=min(1.0, max(0.1, deadline - time.monotonic())))
            break
        except ck.KafkaException as exc:
            producer.poll(0.1)  # serves error_cb
            said = [e.str() for e in errors if e.code() != ck.KafkaError._ALL_BROKERS_DOWN]
            if any(map(is_security, said)) or time.monotonic() >= deadline:
                raise failure(servers, component,
                              said[0] if said else exc.args[0].str()) from None
    _checked.add(key)
