"""How sluice authenticates to a Kafka cluster and checks its certificate (docs/security.md).

```yaml
broker:
  bootstrap_servers: b-1.example.com:9096
  embedded: false
  security:
    protocol: SASL_SSL              # PLAINTEXT (default), SSL, SASL_PLAINTEXT, SASL_SSL
    sasl_mechanism: SCRAM-SHA-512   # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
    user: sluice-tap
    password_env: SLUICE_KAFKA_PASSWORD   # or password_file, or password (warned)
    ca_file: certs/ca.pem           # PEM bundle the broker's certificate is checked against
    cert_file: certs/client.pem     # mutual TLS: the client's certificate and key
    key_file: certs/client.key
    key_password_env: SLUICE_KAFKA_KEY_PASSWORD
    check_hostname: true            # the broker's name must match its certificate
```

The same ``security:`` mapping may stand beside a ``bootstrap_servers`` of a source's or a
job's own ``broker:`` and of a dispersal Kafka target (several clusters). Secrets are read only
when a client is made (credentials.py) and never show in a repr or a message.

A bootstrap list travels through sluice as text; ``KafkaServers`` is that text carrying its
cluster's security settings, so every function handed a bootstrap list hands them on, into
Spark tasks too (it pickles with them). python_ingest/kafka/security.py maps them to each
client library.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from python_ingest import credentials
from python_ingest.config.checks import check_keys, choice
from python_ingest.config.registry import RegistryConfig, parse_registry
from python_ingest.config.secrets import masked_repr
from python_ingest.exceptions import ConfigError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_FILES = ("ca_file", "cert_file", "key_file")
_KEY_SECRETS = ("key_password", "key_password_env", "key_password_file")
KEYS = {"protocol", "sasl_mechanism", "user", *credentials.FIELDS, *_FILES, *_KEY_SECRETS,
        "check_hostname"}
# environment variables over broker.security (the project's cluster)
ENV = {"SLUICE_KAFKA_SECURITY_PROTOCOL": "protocol", "SLUICE_KAFKA_SASL_MECHANISM":
       "sasl_mechanism", "SLUICE_KAFKA_USER": "user", "SLUICE_KAFKA_CA_FILE": "ca_file",
       "SLUICE_KAFKA_CERT_FILE": "cert_file", "SLUICE_KAFKA_KEY_FILE": "key_file"}
PASSWORD_ENV = "SLUICE_KAFKA_PASSWORD"  # when set, the password comes from it


@dataclass(frozen=True, repr=False)
class KafkaSecurity:
    """A cluster's ``security.protocol`` and what it needs; the default is PLAINTEXT."""

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    password_env: str | None = None
    password_file: str | None = None
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    key_password: str | None = field(default=None, repr=False)
    key_password_env: str | None = None
    key_password_file: str | None = None
    check_hostname: bool = True
    where: str = "broker.security"  # the config path errors name

    def __repr__(self) -> str:
        return masked_repr(self)

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol.endswith("SSL")

    def secret(self) -> str:
        """The SASL password. For clients only: never log it or put it in a message."""
        return credentials.reveal(self.where, self.password, self.password_env,
                                  self.password_file)

    def key_secret(self) -> str | None:
        """The client key's password (None: the key is not encrypted)."""
        if not (self.key_password or self.key_password_env or self.key_password_file):
            return None
        return credentials.reveal(f"{self.where}.key", self.key_password, self.key_password_env,
                                  self.key_password_file)


PLAINTEXT = KafkaSecurity()


class KafkaServers(str):
    """A bootstrap list (``host:port,...``) with its cluster's security settings: it is the
    text wherever text is wanted, and python_ingest/kafka/security.py reads ``security``."""

    security: KafkaSecurity

    def __new__(cls, servers: str, security: KafkaSecurity | None = None) -> KafkaServers:
        made = super().__new__(cls, servers)
        inherited = getattr(servers, "security", PLAINTEXT)
        made.security = security or (inherited if isinstance(inherited, KafkaSecurity)
                                     else PLAINTEXT)
        return made

    def __reduce__(self) -> tuple[Any, ...]:
        return (KafkaServers, (str(self), self.security))


def parse_security(raw: Any, where: str, root: Path) -> KafkaSecurity:
    """Validate a ``security`` mapping (``where`` names it in errors)."""
    if raw is None:
        return replace(PLAINTEXT, where=where)
    if not isinstance(raw, Mapping):
        raise ConfigError(where, f"expected a mapping, got {type(raw).__name__}",
                          "protocol, sasl_mechanism, user, password_env, ca_file, ...")
    check_keys(raw, KEYS, where)
    for key in ("user", *credentials.FIELDS, *_FILES, *_KEY_SECRETS):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise ConfigError(f"{where}.{key}", "expected text")
    protocol = choice(str(raw.get("protocol", "PLAINTEXT")).upper(), PROTOCOLS,
                      f"{where}.protocol")
    mechanism = raw.get("sasl_mechanism")
    if protocol.startswith("SASL_"):
        mechanism = choice(str(mechanism or "SCRAM-SHA-512").upper(), MECHANISMS,
                           f"{where}.sasl_mechanism")
        if not raw.get("user"):
            raise ConfigError(f"{where}.user", f"is required with protocol {protocol}",
                              "the SASL user name")
        if not any(raw.get(f) is not None for f in credentials.FIELDS):
            raise ConfigError(f"{where}.password_env", f"a password is required with protocol "
                              f"{protocol}", "password_env (an environment variable) or "
                              "password_file (a file only sluice's user can read)")
    elif mechanism is not None or raw.get("user") is not None:
        raise ConfigError(f"{where}.sasl_mechanism", f"protocol {protocol} has no SASL login",
                          "use protocol SASL_SSL (or SASL_PLAINTEXT) for a user and password")
    if not protocol.endswith("SSL") and any(raw.get(f) for f in _FILES):
        raise ConfigError(f"{where}.protocol", f"certificate files need TLS, not {protocol}",
                          "use protocol SSL or SASL_SSL")
    if bool(raw.get("cert_file")) != bool(raw.get("key_file")):
        raise ConfigError(f"{where}.key_file", "a client certificate needs its key, and a key "
                          "its certificate", "give cert_file and key_file together")
    check = raw.get("check_hostname", True)
    if not isinstance(check, bool):
        raise ConfigError(f"{where}.check_hostname", f"expected true or false, got {check!r}")
    if raw.get("password_file") is not None:  # a missing secret fails before any data moves
        path = root / Path(str(raw["password_file"])).expanduser()
        if not path.is_file():
            raise ConfigError(f"{where}.password_file", f"file {path} does not exist",
                              "a file holding the SASL password, readable by sluice only")
    files = {}
    for key in _FILES:
        if raw.get(key):
            path = root / Path(str(raw[key])).expanduser()
            if not path.is_file():
                raise ConfigError(f"{where}.{key}", f"file {path} does not exist")
            files[key] = str(path)
    key_password = _key_password(raw, where, root)
    return KafkaSecurity(protocol=protocol, sasl_mechanism=mechanism, user=raw.get("user"),
                         password=raw.get("password"), password_env=raw.get("password_env"),
                         password_file=credentials.check(where, raw, root), **files,
                         **key_password, check_hostname=check, where=where)


def _key_password(raw: Mapping[str, Any], where: str, root: Path) -> dict[str, str | None]:
    """The key password's fields, checked as credentials.py checks a password's."""
    as_password = {f: raw.get(k) for f, k in zip(credentials.FIELDS, _KEY_SECRETS, strict=True)}
    file = credentials.check(f"{where}.key", as_password, root)
    return {"key_password": raw.get("key_password"),
            "key_password_env": raw.get("key_password_env"), "key_password_file": file}


def parse_servers(raw: Mapping[str, Any], where: str, root: Path,
                  default: str | None = None) -> KafkaServers | None:
    """``bootstrap_servers`` and ``security`` of ``raw`` as KafkaServers (None: neither given
    and no ``default``)."""
    servers = raw.get("bootstrap_servers", default)
    if servers is None:
        if raw.get("security") is not None:
            raise ConfigError(f"{where}.bootstrap_servers", "is required with security")
        return None
    if not isinstance(servers, str) or not servers.strip():
        raise ConfigError(f"{where}.bootstrap_servers", "expected host:port[,host:port]")
    return KafkaServers(servers, parse_security(raw.get("security"), f"{where}.security", root))


def with_env(broker: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """``broker`` with the SLUICE_KAFKA_* environment variables applied to its security."""
    security = dict(broker.get("security") or {}) if isinstance(broker.get("security"),
                                                                Mapping) else {}
    for var, key in ENV.items():
        if env.get(var):
            security[key] = env[var]
    if env.get(PASSWORD_ENV):
        for key in credentials.FIELDS:
            security.pop(key, None)
        security["password_env"] = PASSWORD_ENV
    return {**broker, "security": security} if security else dict(broker)


@dataclass(frozen=True, repr=False)
class ClusterOverride:
    """A source's own ``broker:`` (``bootstrap_servers`` and/or ``security``): another
    cluster, or the project's cluster as another user (the tap's, with only its ACLs)."""

    bootstrap_servers: str | None = None
    security: KafkaSecurity | None = None

    def __repr__(self) -> str:
        return masked_repr(self)

    def on(self, servers: str) -> KafkaServers:
        """The servers to use instead of the project's ``servers``."""
        return KafkaServers(self.bootstrap_servers or str(servers),
                            self.security or getattr(servers, "security", PLAINTEXT))


def cluster_of(servers: str, override: ClusterOverride | None) -> str:
    """The cluster a job or a source talks to: its own ``broker:`` over the project's
    ``servers`` (``Settings.kafka_for``: every Kafka client of a job or a tap takes its
    bootstrap list, and so its security settings, from here)."""
    return servers if override is None else override.on(servers)


def parse_override(raw: Any, where: str, root: Path) -> ClusterOverride | None:
    """A ``broker:`` mapping of a source: bootstrap_servers, security, or both."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ConfigError(where, f"expected a mapping, got {type(raw).__name__}",
                          "bootstrap_servers and/or security")
    check_keys(raw, {"bootstrap_servers", "security"}, where)
    servers = raw.get("bootstrap_servers")
    if servers is not None and (not isinstance(servers, str) or not servers.strip()):
        raise ConfigError(f"{where}.bootstrap_servers", "expected host:port[,host:port]")
    security = (None if raw.get("security") is None
                else parse_security(raw["security"], f"{where}.security", root))
    return ClusterOverride(servers, security)


CONNECT_URL_ENV = "SLUICE_KAFKA_CONNECT_URL"  # over kafka_connect.url
CONNECT_PASSWORD_ENV = "SLUICE_KAFKA_CONNECT_PASSWORD"  # when set, the password comes from it


def connect_env(data: dict[str, Any], env: Mapping[str, str]) -> None:
    """The SLUICE_KAFKA_CONNECT_* environment variables over ``data["kafka_connect"]``."""
    if not (env.get(CONNECT_URL_ENV) or env.get(CONNECT_PASSWORD_ENV)):
        return
    raw = data.get("kafka_connect")
    connect = dict(raw) if isinstance(raw, Mapping) else {}
    if env.get(CONNECT_URL_ENV):
        connect["url"] = env[CONNECT_URL_ENV]
    if env.get(CONNECT_PASSWORD_ENV):
        for key in credentials.FIELDS:
            connect.pop(key, None)
        connect["password_env"] = CONNECT_PASSWORD_ENV
    data["kafka_connect"] = connect


def parse_connect(raw: Any, root: Path, where: str = "kafka_connect") -> RegistryConfig | None:
    """Kafka Connect's REST API (runtime/connect_rest.py): the Schema Registry's mapping (url,
    ca_file, user and password_env/file, or token_env/file, timeout_s)."""
    if raw is None:
        return None
    url = raw.get("url") if isinstance(raw, Mapping) else None
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ConfigError(f"{where}.url", f"expected an http(s) URL, got {url!r}",
                          "a Connect worker's REST listener, e.g. https://connect:8443")
    return parse_registry(raw, where, root)
