"""The warehouse on an object store: ``catalog.warehouse: s3a://bucket/prefix`` and
``catalog.s3:`` (docs/deploy.md, "The warehouse on S3").

Hadoop's S3A file system reads and writes every table file; these keys say how it reaches the
bucket, each also from the environment (``SLUICE_S3_*``, over the file's):

- ``endpoint`` (``SLUICE_S3_ENDPOINT``): an S3-compatible server's URL; none for AWS itself;
- ``path_style`` (``SLUICE_S3_PATH_STYLE``): ``http://host/bucket/key`` instead of a bucket's
  own host name (most S3-compatible servers want it);
- ``region`` (``SLUICE_S3_REGION``);
- ``credentials`` (``SLUICE_S3_CREDENTIALS``): where the access key comes from:
  ``chain`` (default): AWS's own chain on every node: the ``AWS_ACCESS_KEY_ID`` and
  ``AWS_SECRET_ACCESS_KEY`` variables, then the instance profile (EC2, EKS) ;
  ``env``: the variables named by ``access_key_env`` and ``secret_key_env`` (by default AWS's
  own names), read by the driver and handed to Spark;
  ``file``: an AWS credentials file (``credentials_file``, section ``profile``), likewise.

Secrets are read only when Spark starts (``reveal``), never shown by a repr, and reach Spark's
conf only under keys Spark redacts (``...secret.key``, ``...access.key``).
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from python_ingest.config.checks import check_keys, choice, mapping
from python_ingest.exceptions import ConfigError

CREDENTIAL_SOURCES = ("chain", "env", "file")
ENV_NAMES = {"SLUICE_S3_ENDPOINT": "endpoint", "SLUICE_S3_PATH_STYLE": "path_style",
             "SLUICE_S3_REGION": "region", "SLUICE_S3_CREDENTIALS": "credentials"}


@dataclass(frozen=True)
class S3Config:
    """How S3A reaches the warehouse's bucket; no secret is held here, only where it is."""

    endpoint: str | None = None
    path_style: bool = False
    region: str | None = None
    credentials: str = "chain"
    access_key_env: str = "AWS_ACCESS_KEY_ID"
    secret_key_env: str = "AWS_SECRET_ACCESS_KEY"
    credentials_file: str | None = None
    profile: str = "default"

    def reveal_keys(self) -> tuple[str, str] | None:
        """The access key and its secret, for Spark's conf only (None: AWS's chain finds them
        on each node). Never log them."""
        if self.credentials == "env":
            values = [os.environ.get(name) for name in (self.access_key_env,
                                                        self.secret_key_env)]
            if None in values or "" in values:
                raise ConfigError("catalog.s3.credentials",
                                  f"credentials: env, but {self.access_key_env} or "
                                  f"{self.secret_key_env} is not set",
                                  "set both variables, or use credentials: chain or file")
            return str(values[0]), str(values[1])
        if self.credentials == "file":
            return _from_file(str(self.credentials_file), self.profile)
        return None


def _from_file(file: str, profile: str) -> tuple[str, str]:
    parser = configparser.ConfigParser()
    try:
        with open(file) as text:
            parser.read_file(text)
    except OSError as exc:
        raise ConfigError("catalog.s3.credentials_file",
                          f"cannot read the credentials file {file}: {exc.strerror}") from None
    section = parser[profile] if parser.has_section(profile) else None
    if section is None or not section.get("aws_access_key_id") \
            or not section.get("aws_secret_access_key"):
        raise ConfigError("catalog.s3.credentials_file",
                          f"{file} has no [{profile}] with aws_access_key_id and "
                          "aws_secret_access_key", "write it as AWS's credentials file is")
    return section["aws_access_key_id"], section["aws_secret_access_key"]


def parse_s3(raw_value: Any, root: Path) -> S3Config:
    raw = mapping(raw_value, "catalog.s3")
    check_keys(raw, {"endpoint", "path_style", "region", "credentials", "access_key_env",
                     "secret_key_env", "credentials_file", "profile"}, "catalog.s3")
    path_style = raw.get("path_style", False)
    if isinstance(path_style, str):
        path_style = path_style.strip().lower() in ("true", "1", "yes")
    if not isinstance(path_style, bool):
        raise ConfigError("catalog.s3.path_style", f"expected true or false, got {path_style!r}")
    credentials = choice(raw.get("credentials", "chain"), CREDENTIAL_SOURCES,
                         "catalog.s3.credentials")
    file = raw.get("credentials_file")
    if credentials == "file" and not file:
        raise ConfigError("catalog.s3.credentials_file", "credentials: file needs a file",
                          "e.g. credentials_file: /etc/sluice/aws-credentials")
    endpoint = raw.get("endpoint")
    if endpoint and "@" in str(endpoint):
        raise ConfigError("catalog.s3.endpoint", "the endpoint holds a user or password",
                          "give the keys by credentials: env, file or chain")
    return S3Config(
        endpoint=str(endpoint) if endpoint else None, path_style=path_style,
        region=str(raw["region"]) if raw.get("region") else None, credentials=credentials,
        access_key_env=str(raw.get("access_key_env", S3Config.access_key_env)),
        secret_key_env=str(raw.get("secret_key_env", S3Config.secret_key_env)),
        credentials_file=None if not file else str(root / Path(str(file)).expanduser()),
        profile=str(raw.get("profile", S3Config.profile)))


def with_env(raw: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """The file's ``catalog.s3:`` keys with ``SLUICE_S3_*`` variables on top."""
    return {**raw, **{key: env[var] for var, key in ENV_NAMES.items() if env.get(var)}}


def is_url(warehouse: str) -> bool:
    """Whether ``warehouse`` names a Hadoop file system by URL (``s3a://``, ``hdfs://``, ...):
    used as is, never resolved against the config file's folder."""
    return "://" in warehouse or warehouse.startswith("file:")


def warehouse_location(warehouse: str, root: Path) -> str:
    """The warehouse as Spark and sluice address it: a URL as given (no trailing slash), a
    path resolved against the config file's folder."""
    if is_url(warehouse):
        return warehouse.rstrip("/")
    path = Path(warehouse).expanduser()
    return str(path if path.is_absolute() else root / path)


def on_object_store(warehouse: str) -> bool:
    """Whether the warehouse is on S3 (S3A): its shared state then needs S3's conditional
    writes (runtime/s3.py)."""
    return warehouse.startswith(("s3a://", "s3://", "s3n://"))
