"""Sources (``sources:`` in sluice.yml) that ``sluice tap`` reads: MySQL-family servers (their
binlog) and PostgreSQL servers (logical replication, ``kind: postgres``,
docs/postgres-source.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from python_ingest import credentials
from python_ingest.config.checks import NAME, check_keys, choice, mapping, positive_int
from python_ingest.config.kafka import ClusterOverride, parse_override
from python_ingest.config.secrets import masked_repr
from python_ingest.exceptions import ConfigError

SOURCE_KINDS = ("mariadb", "mysql", "postgres")
POSTGRES = "postgres"
START_FROM = ("current", "earliest")


@dataclass(frozen=True, repr=False)
class SourceConfig:
    """A MySQL-family server whose binlog ``sluice tap`` reads (see docs/binlog-tap.md); its
    repr leaves the password out and masks one in a URL (config/secrets.py)."""

    name: str
    kind: str = "mariadb"
    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "sluice"
    password: str | None = field(default=None, repr=False)  # credentials.py: never shown
    password_env: str | None = None
    password_file: str | None = None
    include: tuple[str, ...] = ("*.*",)
    exclude: tuple[str, ...] = ()
    topic_prefix: str | None = None
    partitions: int = 4
    data_center: str | None = None
    schema_registry: str | None = None
    server_id: int = 4201
    heartbeat_s: float = 1.0
    checkpoint_interval_s: float = 1.0
    start_from: str = "current"
    bootstrap_chunk_rows: int = 10_000
    bootstrap_workers: int = 2
    key_columns: Mapping[str, Any] = field(default_factory=dict)  # sources/tap/keys.py
    # kind: postgres only (docs/postgres-source.md)
    database: str = "postgres"
    slot: str | None = None  # default sluice_<source>
    publication: str | None = None  # default sluice_<source>
    slot_lag_warn_bytes: int = 1 << 30  # `sluice status` warns past this much retained WAL
    streaming: bool = False  # pgoutput protocol 2: large transactions streamed before commit
    # TLS, both kinds (MariaDB/MySQL: sources/binlog/tls.py; docs/security.md)
    sslmode: str | None = None  # libpq's (disable ... verify-full); None: libpq's default
    sslrootcert: str | None = None  # the CA bundle that verify-ca / verify-full check against
    sslcert: str | None = None  # a client certificate and its key (certificate login)
    sslkey: str | None = None
    # the tap's own Kafka cluster or user (config/kafka.py); None: the project's broker
    broker: ClusterOverride | None = None

    def __repr__(self) -> str:
        return masked_repr(self)

    @property
    def topic_base(self) -> str:
        return self.topic_prefix or self.name

    @property
    def slot_name(self) -> str:
        """PostgreSQL: the replication slot the tap reads (created when missing)."""
        return self.slot or f"sluice_{self.name}"

    @property
    def publication_name(self) -> str:
        """PostgreSQL: the publication of the tapped tables (created when missing)."""
        return self.publication or f"sluice_{self.name}"

    def secret(self) -> str:
        """The password (credentials.py): from ``password_env``, ``password_file`` or
        ``password``. For opening connections only: never log it or put it in a message."""
        return credentials.reveal(f"sources.{self.name}", self.password, self.password_env,
                                  self.password_file)


def _positive_float(value: Any, field_name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(field_name, f"expected a positive number, got {value!r}")
    return float(value)


def _patterns(value: Any, field_name: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) and "." in i for i in items):
        raise ConfigError(field_name, f"expected 'db.table' patterns (globs), got {value!r}",
                          "for example ['shop.*', 'crm.customers']")
    return tuple(items)


def parse_source(name: str, raw: Mapping[str, Any], root: Path | None = None) -> SourceConfig:
    """Validate one binlog source's mapping from the config file into a SourceConfig."""
    where = f"sources.{name}"
    if not NAME.match(name):
        raise ConfigError(where, "source names are lowercase letters, digits and underscores")
    check_keys(raw, set(SourceConfig.__dataclass_fields__) - {"name"}, where)
    d = SourceConfig
    for text in ("host", "user", *credentials.FIELDS, "topic_prefix", "data_center",
                 "schema_registry", "database", "slot", "publication", *_SSL_FILES):
        if text in raw and not isinstance(raw[text], str):
            raise ConfigError(f"{where}.{text}", "expected text" if "password" in text
                              else f"expected text, got {raw[text]!r}")
    kind = choice(raw.get("kind", d.kind), SOURCE_KINDS, f"{where}.kind")
    port = positive_int(raw.get("port", 5432 if kind == POSTGRES else d.port), f"{where}.port")
    if port > 65535:
        raise ConfigError(f"{where}.port", f"not a TCP port: {port}")
    return SourceConfig(
        name=name,
        kind=kind,
        host=raw.get("host", d.host),
        port=port,
        user=raw.get("user", d.user),
        password=raw.get("password"),
        password_env=raw.get("password_env"),
        password_file=credentials.check(where, raw, root or Path.cwd()),
        include=_patterns(raw.get("include", list(d.include)), f"{where}.include"),
        exclude=_patterns(raw.get("exclude", []), f"{where}.exclude"),
        topic_prefix=raw.get("topic_prefix"),
        partitions=positive_int(raw.get("partitions", d.partitions), f"{where}.partitions"),
        data_center=raw.get("data_center"),
        schema_registry=raw.get("schema_registry"),
        server_id=positive_int(raw.get("server_id", d.server_id), f"{where}.server_id"),
        heartbeat_s=_positive_float(raw.get("heartbeat_s", d.heartbeat_s),
                                    f"{where}.heartbeat_s"),
        checkpoint_interval_s=_positive_float(
            raw.get("checkpoint_interval_s", d.checkpoint_interval_s),
            f"{where}.checkpoint_interval_s"),
        start_from=choice(raw.get("start_from", d.start_from), START_FROM,
                           f"{where}.start_from"),
        bootstrap_chunk_rows=positive_int(raw.get("bootstrap_chunk_rows",
                                                   d.bootstrap_chunk_rows),
                                           f"{where}.bootstrap_chunk_rows"),
        bootstrap_workers=positive_int(raw.get("bootstrap_workers", d.bootstrap_workers),
                                        f"{where}.bootstrap_workers"),
        key_columns=dict(mapping(raw.get("key_columns"), f"{where}.key_columns")),
        database=raw.get("database", d.database),
        slot=_identifier(raw.get("slot"), f"{where}.slot"),
        publication=_identifier(raw.get("publication"), f"{where}.publication"),
        slot_lag_warn_bytes=positive_int(raw.get("slot_lag_warn_bytes", d.slot_lag_warn_bytes),
                                         f"{where}.slot_lag_warn_bytes"),
        streaming=_flag(raw.get("streaming", d.streaming), f"{where}.streaming"),
        sslmode=None if raw.get("sslmode") is None else choice(raw["sslmode"], SSL_MODES,
                                                               f"{where}.sslmode"),
        **{f: _file(raw.get(f), root) for f in _SSL_FILES},
        broker=parse_override(raw.get("broker"), f"{where}.broker", root or Path.cwd()),
    )


SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
_SSL_FILES = ("sslrootcert", "sslcert", "sslkey")


def _file(value: str | None, root: Path | None) -> str | None:
    """A file named in the config, relative to the config file's folder."""
    return None if value is None else str((root or Path.cwd()) / Path(value).expanduser())


def _flag(value: Any, field_name: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(field_name, f"expected true or false, got {value!r}")
    return value


def _identifier(value: Any, field_name: str) -> str | None:
    """A PostgreSQL slot or publication name: lowercase letters, digits, underscores."""
    if value is None:
        return None
    if not NAME.match(value) or len(value) > 63:
        raise ConfigError(field_name, f"expected a name of lowercase letters, digits and "
                          f"underscores (at most 63), got {value!r}")
    return str(value)


