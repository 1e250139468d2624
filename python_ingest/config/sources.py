"""Sources (``sources:`` in sluice.yml) that ``sluice tap`` reads: MySQL-family servers (their
binlog) and PostgreSQL servers (logical replication, ``kind: postgres``,
docs/postgres-source.md). ``SourceConfig`` holds what every kind has; its ``options`` are its
kind's own settings (config/source_kinds.py), read through ``source.of(<Kind>Options)``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from python_ingest import credentials
from python_ingest.config.checks import NAME, check_keys, choice, mapping, positive_int
from python_ingest.config.kafka import ClusterOverride, parse_override
from python_ingest.config.secrets import masked_repr
from python_ingest.config.source_kinds import (
    SECTIONS,
    BinlogOptions,
    SourceOptions,
    check_kind_keys,
)
from python_ingest.exceptions import ConfigError

SOURCE_KINDS = tuple(SECTIONS)
OptionsT = TypeVar("OptionsT", bound=SourceOptions)


@dataclass(frozen=True, repr=False)
class SourceConfig:
    """A database server ``sluice tap`` reads: a MySQL-family binlog (docs/binlog-tap.md) or
    a PostgreSQL slot (docs/postgres-source.md). The fields every kind has, and ``options``:
    the kind's own (``of``). Its repr leaves the password out and masks one in a URL
    (config/secrets.py)."""

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
    heartbeat_s: float = 1.0
    checkpoint_interval_s: float = 1.0
    bootstrap_chunk_rows: int = 10_000
    bootstrap_workers: int = 2
    key_columns: Mapping[str, Any] = field(default_factory=dict)  # sources/tap/keys.py
    # TLS, both kinds (MariaDB/MySQL: sources/binlog/tls.py; docs/security.md)
    sslmode: str | None = None  # libpq's (disable ... verify-full); None: libpq's default
    sslrootcert: str | None = None  # the CA bundle that verify-ca / verify-full check against
    sslcert: str | None = None  # a client certificate and its key (certificate login)
    sslkey: str | None = None
    # the tap's own Kafka cluster or user (config/kafka.py); None: the project's broker
    broker: ClusterOverride | None = None
    # the kind's own settings (config/source_kinds.py): BinlogOptions, PostgresOptions
    options: SourceOptions = field(default_factory=BinlogOptions)

    def __repr__(self) -> str:
        return masked_repr(self)

    @property
    def topic_base(self) -> str:
        return self.topic_prefix or self.name

    def of(self, kind: type[OptionsT]) -> OptionsT:
        """The kind's own settings, as ``kind`` (e.g. ``source.of(PostgresOptions).slot_name``);
        a source of another kind is a config error naming it."""
        if not isinstance(self.options, kind):
            raise ConfigError(f"sources.{self.name}", f"source {self.name} is kind {self.kind}, "
                              f"which has no {kind.__name__}")
        return self.options

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
    """Validate one source's mapping from the config file into a SourceConfig."""
    where = f"sources.{name}"
    if not NAME.match(name):
        raise ConfigError(where, "source names are lowercase letters, digits and underscores")
    d = SourceConfig
    kind = choice(raw.get("kind", d.kind), SOURCE_KINDS, f"{where}.kind")
    section = SECTIONS[kind]
    common = set(SourceConfig.__dataclass_fields__) - {"name", "options"}
    check_kind_keys(raw, common, name, kind, where)
    check_keys(raw, common | set(section.options.KEYS), where)
    for text in ("host", "user", *credentials.FIELDS, "topic_prefix", "data_center",
                 "schema_registry", *_SSL_FILES):
        if text in raw and not isinstance(raw[text], str):
            raise ConfigError(f"{where}.{text}", "expected text" if "password" in text
                              else f"expected text, got {raw[text]!r}")
    port = positive_int(raw.get("port", section.port), f"{where}.port")
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
        heartbeat_s=_positive_float(raw.get("heartbeat_s", d.heartbeat_s),
                                    f"{where}.heartbeat_s"),
        checkpoint_interval_s=_positive_float(
            raw.get("checkpoint_interval_s", d.checkpoint_interval_s),
            f"{where}.checkpoint_interval_s"),
        bootstrap_chunk_rows=positive_int(raw.get("bootstrap_chunk_rows",
                                                   d.bootstrap_chunk_rows),
                                           f"{where}.bootstrap_chunk_rows"),
        bootstrap_workers=positive_int(raw.get("bootstrap_workers", d.bootstrap_workers),
                                        f"{where}.bootstrap_workers"),
        key_columns=dict(mapping(raw.get("key_columns"), f"{where}.key_columns")),
        sslmode=None if raw.get("sslmode") is None else choice(raw["sslmode"], SSL_MODES,
                                                               f"{where}.sslmode"),
        **{f: _file(raw.get(f), root) for f in _SSL_FILES},
        broker=parse_override(raw.get("broker"), f"{where}.broker", root or Path.cwd()),
        options=section.parse(name, raw, where),
    )


SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
_SSL_FILES = ("sslrootcert", "sslcert", "sslkey")


def _file(value: str | None, root: Path | None) -> str | None:
    """A file named in the config, relative to the config file's folder."""
    return None if value is None else str((root or Path.cwd()) / Path(value).expanduser())
