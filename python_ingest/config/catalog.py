"""The Iceberg catalog (``catalog:`` in sluice.yml): where table names live.

- ``hadoop`` (default): metadata files in the warehouse folder, no server. Its commit lock is
  per JVM, so one process at a time may commit to a table (tables/lease.py keeps a job's runs
  apart; docs/deploy.md says when that is not enough).
- ``jdbc``: Iceberg's ``JdbcCatalog`` on PostgreSQL. Table names and their current metadata
  file are rows in the database; a commit is a conditional update of that row, so commits from
  any number of processes and hosts are serialized by the database (a loser re-reads and
  retries). The warehouse folder still holds the data and metadata files.
- ``hive``, ``rest``: a Hive Metastore or an Iceberg REST catalog run elsewhere.

The password comes as a source's does (credentials.py): ``password_env``, ``password_file`` or
plaintext ``password`` (with a warning); ``SLUICE_CATALOG_PASSWORD`` overrides them all.

A jdbc catalog's database over TLS: ``sslmode`` (disable ... verify-full), ``sslrootcert`` (the
CA bundle, PEM), ``sslcert`` and ``sslkey`` (a client certificate; the PostgreSQL JDBC driver
reads the key as PKCS-8, DER or PEM) reach both its connections: Spark's (Iceberg hands
``jdbc.*`` catalog properties to the driver) and sluice's own reads of the catalog's rows
(tables/native.py, libpq). ``tls_failure`` names the setting when the server refuses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from python_ingest import credentials
from python_ingest.config.checks import NAME, check_keys, choice, mapping
from python_ingest.config.s3 import S3Config, parse_s3
from python_ingest.config.s3 import with_env as _s3_with_env
from python_ingest.config.secrets import masked_repr, redact
from python_ingest.exceptions import ConfigError

CATALOG_TYPES = ("hadoop", "jdbc", "hive", "rest")
SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
SSL_KEYS = ("sslmode", "sslrootcert", "sslcert", "sslkey")  # libpq's and the JDBC driver's
PASSWORD_ENV = "SLUICE_CATALOG_PASSWORD"  # overrides the file's password fields
_JDBC_SCHEMES = ("postgresql://", "jdbc:postgresql://")


@dataclass(frozen=True, repr=False)
class CatalogConfig:
    """The Iceberg catalog all sluice tables live in (it becomes Spark's default catalog);
    its repr masks a password in ``uri`` or ``warehouse`` (config/secrets.py)."""

    name: str = "sluice"
    type: str = "hadoop"
    warehouse: str = ".sluice/warehouse"
    uri: str | None = None
    user: str | None = None  # jdbc: the database user
    password: str | None = field(default=None, repr=False)  # credentials.py: never shown
    password_env: str | None = None
    password_file: str | None = None
    s3: S3Config = field(default_factory=S3Config)  # a warehouse on S3 (config/s3.py)
    sslmode: str | None = None  # jdbc: TLS to the database (SSL_KEYS); None: the driver's
    sslrootcert: str | None = None
    sslcert: str | None = None
    sslkey: str | None = None

    def __repr__(self) -> str:
        return masked_repr(self)

    def jdbc_ssl(self) -> dict[str, str]:
        """The TLS settings given, by their libpq/JDBC names (both drivers read the same)."""
        return {key: str(getattr(self, key)) for key in SSL_KEYS if getattr(self, key)}

    def jdbc_url(self) -> str:
        """The JDBC URL of a jdbc catalog's database (``jdbc:postgresql://host:port/db``)."""
        uri = str(self.uri)
        return uri if uri.startswith("jdbc:") else f"jdbc:{uri}"

    def reveal_password(self) -> str | None:
        """The database password, for Spark's catalog conf only: never log it."""
        if self.password is None and not self.password_env and not self.password_file:
            return None
        return credentials.reveal("catalog", self.password, self.password_env,
                                  self.password_file)


def parse_catalog(raw_value: Any, root: Path) -> CatalogConfig:
    raw = mapping(raw_value, "catalog")
    check_keys(raw, {"name", "type", "warehouse", "uri", "user", "s3", *credentials.FIELDS,
                     *SSL_KEYS}, "catalog")
    kind = choice(raw.get("type", CatalogConfig.type), CATALOG_TYPES, "catalog.type")
    uri = raw.get("uri")
    if kind in ("jdbc", "hive", "rest") and not uri:
        example = {"jdbc": "postgresql://127.0.0.1:5432/sluice", "hive": "thrift://host:9083",
                   "rest": "http://host:8181"}[kind]
        raise ConfigError("catalog.uri", f"a {kind} catalog needs a uri",
                          f"e.g. uri: {example} (or SLUICE_CATALOG_URI)")
    if kind == "jdbc":
        _check_jdbc_uri(str(uri))
    config = CatalogConfig(
        name=str(raw.get("name", CatalogConfig.name)),
        type=kind,
        warehouse=str(raw.get("warehouse", CatalogConfig.warehouse)),
        uri=None if uri is None else str(uri),
        user=None if raw.get("user") is None else str(raw["user"]),
        password=raw.get("password"),
        password_env=raw.get("password_env"),
        password_file=credentials.check("catalog", raw, root),
        s3=parse_s3(raw.get("s3"), root),
        **_ssl(raw, kind, root),
    )
    if not NAME.match(config.name):
        raise ConfigError("catalog.name", "use lowercase letters, digits and underscores")
    return config


def _ssl(raw: Mapping[str, Any], kind: str, root: Path) -> dict[str, str]:
    """The jdbc catalog's TLS settings, checked: a known mode, files that exist."""
    given = {key: raw[key] for key in SSL_KEYS if raw.get(key) is not None}
    if given and kind != "jdbc":
        raise ConfigError(f"catalog.{next(iter(given))}", f"TLS settings are for a jdbc "
                          f"catalog's database, not a {kind} catalog")
    out = {}
    if "sslmode" in given:
        out["sslmode"] = choice(str(given["sslmode"]), SSL_MODES, "catalog.sslmode")
    for key in SSL_KEYS[1:]:
        if key in given:
            path = root / Path(str(given[key])).expanduser()
            if not path.is_file():
                raise ConfigError(f"catalog.{key}", f"file {path} does not exist")
            out[key] = str(path)
    return out


def tls_failure(detail: str) -> str | None:
    """A message naming what to set when the catalog's database refused a connection for TLS
    (``detail``: the driver's error, a Java stack trace too), or None when the refusal was
    something else."""
    fix = _tls_fix(detail.lower())
    if fix is None:
        return None
    said = next((line.strip() for line in detail.splitlines()
                 if "PSQLException" in line or "SSL" in line), detail.splitlines()[0])
    return f"{fix} (docs/security.md). The driver said: {redact(said)[:500]}"


def _tls_fix(low: str) -> str | None:
    if any(m in low for m in ("pkix path", "certificate verify failed", "unable to find valid "
                              "certification path", "could not open ssl root certificate",
                              "certpathvalidator", "sslhandshake")):
        return ("the JDBC catalog's database certificate is not trusted: set "
                "catalog.sslrootcert to the PEM bundle of the CA that signed it (and "
                "catalog.sslmode verify-full or verify-ca)")
    if "hostname" in low and ("verif" in low or "match" in low):
        return ("the JDBC catalog's database certificate does not name the host in "
                "catalog.uri: use a name it lists, or catalog.sslmode verify-ca")
    if "no encryption" in low or "does not support ssl" in low:
        return ("the JDBC catalog's database and sluice disagree on TLS: set catalog.sslmode "
                "(require, verify-full) as the server's pg_hba.conf wants, and "
                "catalog.sslrootcert")
    return None


def _check_jdbc_uri(uri: str) -> None:
    """The uri becomes Spark's ``...uri`` conf, whose value Spark and Iceberg log unmasked
    (only keys naming a password are): it must hold no password, and a message quotes it
    only masked (config/secrets.py)."""
    if "@" in uri.split("://", 1)[-1].split("/", 1)[0] or redact(uri) != uri:
        raise ConfigError("catalog.uri", "the uri holds a user or password",
                          "give catalog.user and catalog.password_env (or password_file) "
                          "instead; the uri is logged, a password must not be")
    if not uri.startswith(_JDBC_SCHEMES):
        raise ConfigError("catalog.uri", f"a jdbc catalog lives in PostgreSQL, "
                          f"got {redact(uri)!r}",
                          "e.g. uri: postgresql://127.0.0.1:5432/sluice")


def with_env(raw: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """The file's ``catalog:`` keys with ``SLUICE_CATALOG_*`` variables on top; a password in
    ``SLUICE_CATALOG_PASSWORD`` replaces the file's password fields (it is read, like
    ``password_env``, only when Spark starts)."""
    names = {"SLUICE_CATALOG_NAME": "name", "SLUICE_CATALOG_TYPE": "type",
             "SLUICE_CATALOG_URI": "uri", "SLUICE_CATALOG_USER": "user",
             "SLUICE_CATALOG_SSLMODE": "sslmode", "SLUICE_CATALOG_SSLROOTCERT": "sslrootcert",
             "SLUICE_WAREHOUSE": "warehouse"}
    merged = {**raw, **{key: env[var] for var, key in names.items() if env.get(var)}}
    if raw.get("s3") is None or isinstance(raw["s3"], Mapping):  # else parse_s3 refuses it
        merged["s3"] = _s3_with_env(raw.get("s3") or {}, env)
    if env.get(PASSWORD_ENV) is not None:
        for key in credentials.FIELDS:
            merged.pop(key, None)
        merged["password_env"] = PASSWORD_ENV
    return merged
