"""A job's ``dispersal:`` section: the online stores its lake table is copied to after each
merge (docs/dispersal.md).

```yaml
jobs:
  trips:
    dispersal:
      trips_pg: {type: postgres, dsn: "host=db dbname=app user=sluice", table: public.trips,
                 password_env: TRIPS_PG_PASSWORD}
      trips_topic: {type: kafka, topic: lake.trips}
```

Validated here, before any data moves; every error names the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from python_ingest import credentials
from python_ingest.config.checks import NAME, check_keys, mapping, positive_int
from python_ingest.config.kafka import parse_servers
from python_ingest.config.secrets import masked_repr
from python_ingest.exceptions import ConfigError

TARGET_TYPES = ("postgres", "kafka")
# a PostgreSQL table name: [schema.]table, plain identifiers (quoted as they are written)
PG_TABLE = re.compile(r"^([a-z_][a-z0-9_]*\.)?[a-z_][a-z0-9_]*$")
KAFKA_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
DEFAULT_CHUNK_ROWS = 50_000


@dataclass(frozen=True, repr=False)
class PostgresTarget:
    """A PostgreSQL table kept equal to the lake table (upserts by row key, deletes).

    ``dsn`` is a libpq connection string or URL; ``dsn_env`` names an environment variable
    whose value replaces it (a DSN with its password, kept out of the config file); the
    password alone may come from ``password_env`` / ``password_file`` (credentials.py). The
    repr masks the DSN's password and leaves ``password`` out (config/secrets.py)."""

    name: str
    table: str
    dsn: str | None = None
    dsn_env: str | None = None
    password: str | None = field(default=None, repr=False)
    password_env: str | None = None
    password_file: str | None = None
    chunk_rows: int = DEFAULT_CHUNK_ROWS
    type: str = "postgres"

    def __repr__(self) -> str:
        return masked_repr(self)

    def conninfo(self, where: str) -> tuple[str, str | None]:
        """The DSN to connect with and the password (None: the DSN's own, or none)."""
        dsn = self.dsn
        if self.dsn_env:
            import os

            dsn = os.environ.get(self.dsn_env) or dsn
            if not dsn:
                raise ConfigError(f"{where}.dsn_env",
                                  f"environment variable {self.dsn_env} is not set")
        given = self.password or self.password_env or self.password_file
        password = credentials.reveal(where, self.password, self.password_env,
                                      self.password_file) if given else None
        return dsn or "", password


@dataclass(frozen=True, repr=False)
class KafkaTarget:
    """A topic keyed by row key with Avro values (null value: the row was deleted);
    ``bootstrap_servers`` None means the job's cluster (its ``broker:``, else the project's;
    Settings.kafka_for); its own carries its own ``security:``, config/kafka.py."""

    name: str
    topic: str
    bootstrap_servers: str | None = None
    chunk_rows: int = DEFAULT_CHUNK_ROWS
    type: str = "kafka"

    def __repr__(self) -> str:
        return masked_repr(self)


DispersalTarget = PostgresTarget | KafkaTarget


def parse_dispersal(raw: Any, where: str, root: Path) -> dict[str, DispersalTarget]:
    """The targets of ``jobs.<job>.dispersal`` (``where``), by name."""
    targets: dict[str, DispersalTarget] = {}
    for name, spec in mapping(raw, where).items():
        at = f"{where}.{name}"
        if not NAME.match(str(name)):
            raise ConfigError(at, "target names are lowercase letters, digits and underscores",
                              "the name is what `sluice disperse JOB --to NAME` takes")
        targets[str(name)] = _parse_target(str(name), mapping(spec, at), at, root)
    return targets


def _parse_target(name: str, spec: Mapping[str, Any], at: str, root: Path) -> DispersalTarget:
    kind = spec.get("type")
    if kind not in TARGET_TYPES:
        raise ConfigError(f"{at}.type", f"expected one of {', '.join(TARGET_TYPES)}, "
                          f"got {kind!r}")
    chunk_rows = positive_int(spec.get("chunk_rows", DEFAULT_CHUNK_ROWS), f"{at}.chunk_rows")
    if kind == "kafka":
        check_keys(spec, {"type", "topic", "bootstrap_servers", "chunk_rows", "security"}, at)
        topic = spec.get("topic")
        if not isinstance(topic, str) or not KAFKA_TOPIC.match(topic):
            raise ConfigError(f"{at}.topic", f"expected a Kafka topic name, got {topic!r}",
                              "letters, digits, '.', '_' and '-'")
        servers = spec.get("bootstrap_servers")
        if servers is not None and (not isinstance(servers, str) or not servers.strip()):
            raise ConfigError(f"{at}.bootstrap_servers", "expected host:port[,host:port]",
                              "or leave it out for the project's broker")
        return KafkaTarget(name=name, topic=topic, chunk_rows=chunk_rows,
                           bootstrap_servers=parse_servers(spec, at, root))
    check_keys(spec, {"type", "dsn", "url", "dsn_env", "table", "password", "password_env",
                      "password_file", "chunk_rows"}, at)
    if spec.get("dsn") and spec.get("url"):
        raise ConfigError(f"{at}.url", "give dsn or url, not both")
    dsn = spec.get("dsn") or spec.get("url")
    dsn_env = spec.get("dsn_env")
    if dsn is not None and not isinstance(dsn, str):
        raise ConfigError(f"{at}.dsn", "expected a connection string (text), got a "
                          f"{type(dsn).__name__}", "it is not quoted: it may hold a password")
    if dsn_env is not None and not isinstance(dsn_env, str):
        raise ConfigError(f"{at}.dsn_env", f"expected an environment variable name, "
                          f"got {dsn_env!r}")
    if not dsn and not dsn_env:
        raise ConfigError(f"{at}.dsn", "is required (or url, or dsn_env naming an "
                          "environment variable that holds it)")
    table = spec.get("table")
    if not isinstance(table, str) or not PG_TABLE.match(table):
        raise ConfigError(f"{at}.table", f"expected [schema.]table in lowercase, got {table!r}")
    password_file = credentials.check(at, spec, root)
    return PostgresTarget(name=name, table=table, dsn=dsn, dsn_env=dsn_env,
                          password=spec.get("password"), password_env=spec.get("password_env"),
                          password_file=password_file, chunk_rows=chunk_rows)
