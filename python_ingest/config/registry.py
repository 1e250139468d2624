"""A Schema Registry over HTTP (Confluent's API): where Confluent-framed messages' writer
schemas come from when a job has no folder of ``<id>.avsc`` files (docs/debezium.md).

```yaml
schema_registry:                      # the project's registry (top level of sluice.yml)
  url: http://registry:8081           # Apicurio: http://host:8080/apis/ccompat/v7
  user: sluice                        # basic auth, optional
  password_env: SLUICE_REGISTRY_PASSWORD   # or password_file (credentials.py)
  timeout_s: 10
  ca_file: certs/ca.pem               # https: the CA bundle its certificate is checked against
  # token_env: SLUICE_REGISTRY_TOKEN  # bearer auth instead of user/password (or token_file)
```

A job may name its own registry with the same mapping under ``jobs.<name>.schema_registry``
(a text there is still a folder of ``<id>.avsc`` files, the embedded default).
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from python_ingest import credentials
from python_ingest.config.checks import check_keys
from python_ingest.config.secrets import masked_repr
from python_ingest.exceptions import ConfigError

URL_ENV = "SLUICE_SCHEMA_REGISTRY_URL"


@dataclass(frozen=True, repr=False)
class RegistryConfig:
    """A Confluent-compatible Schema Registry; subjects by TopicNameStrategy
    (``<topic>-value``). The password never shows in a repr (credentials.py)."""

    url: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    password_env: str | None = None
    password_file: str | None = None
    timeout_s: float = 10.0
    ca_file: str | None = None  # https: PEM bundle (None: the system's CAs)
    token: str | None = field(default=None, repr=False)  # bearer auth, never shown
    token_env: str | None = None
    token_file: str | None = None

    def __repr__(self) -> str:
        return masked_repr(self)

    def bearer(self, where: str = "schema_registry") -> str | None:
        """The bearer token, None without one. For requests only: never log it."""
        if not (self.token or self.token_env or self.token_file):
            return None
        return credentials.reveal(f"{where}.token", self.token, self.token_env,
                                  self.token_file)

    def secret(self, where: str = "schema_registry") -> str | None:
        """The basic-auth password, None without a user. For requests only: never log it."""
        if self.user is None:
            return None
        return credentials.reveal(where, self.password, self.password_env, self.password_file)


def parse_registry(raw: Any, where: str, root: Path) -> RegistryConfig:
    """Validate a ``schema_registry`` mapping (``where`` names it in errors)."""
    if not isinstance(raw, Mapping):
        raise ConfigError(where, f"expected a mapping with a url, got {raw!r}")
    check_keys(raw, set(RegistryConfig.__dataclass_fields__), where)
    tokens = {f: raw.get(k) for f, k in zip(credentials.FIELDS, _TOKEN, strict=True)}
    if raw.get("user") is not None and any(v is not None for v in tokens.values()):
        raise ConfigError(f"{where}.token_env", "give basic auth (user, password) or a bearer "
                          "token, not both")
    token_file = credentials.check(f"{where}.token", tokens, root)
    ca_file = raw.get("ca_file")
    if ca_file is not None:
        if not isinstance(ca_file, str) or not (root / Path(ca_file).expanduser()).is_file():
            raise ConfigError(f"{where}.ca_file", f"expected a PEM file, got {ca_file!r}")
        ca_file = str(root / Path(ca_file).expanduser())
    url = raw.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ConfigError(f"{where}.url", f"expected an http(s) URL, got {url!r}",
                          "the registry's Confluent API, e.g. http://registry:8081 "
                          "(Apicurio: http://host:8080/apis/ccompat/v7)")
    for text in ("user", *credentials.FIELDS, *_TOKEN):
        if text in raw and not isinstance(raw[text], str):
            raise ConfigError(f"{where}.{text}", "expected text")
    if raw.get("user") is None and any(raw.get(f) is not None for f in credentials.FIELDS):
        raise ConfigError(f"{where}.user", "is required with a password (basic auth)")
    timeout = raw.get("timeout_s", RegistryConfig.timeout_s)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise ConfigError(f"{where}.timeout_s", f"expected a positive number, got {timeout!r}")
    return RegistryConfig(url=url.rstrip("/"), user=raw.get("user"), password=raw.get("password"),
                          password_env=raw.get("password_env"),
                          password_file=credentials.check(where, raw, root),
                          timeout_s=float(timeout), ca_file=ca_file, token=raw.get("token"),
                          token_env=raw.get("token_env"), token_file=token_file)


_TOKEN = ("token", "token_env", "token_file")  # as credentials.FIELDS are for a password


def http_json(url: str, *, user: str | None, password: str | None, token: str | None,
              ca_file: str | None, timeout_s: float, method: str = "GET",
              data: bytes | None = None, headers: Mapping[str, str] | None = None) -> Any:
    """``method`` ``url`` with basic (``user``) or bearer (``token``) auth, an https URL's
    certificate checked against ``ca_file`` (the system's CAs without it); the JSON answer,
    None for a 404 or an empty body. Other HTTP errors (urllib.error.HTTPError), OSError and
    ValueError (not JSON) are the caller's to word: the registry's and Kafka Connect's
    clients name their own settings."""
    request = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    if user is not None:
        pair = base64.b64encode(f"{user}:{password or ''}".encode()).decode()
        request.add_header("Authorization", f"Basic {pair}")
    elif token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    context = ssl.create_default_context(cafile=ca_file) if url.startswith("https:") else None
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=context) as response:
            text = response.read()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise
    return json.loads(text) if text else None
