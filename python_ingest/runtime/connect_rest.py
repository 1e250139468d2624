"""Kafka Connect's REST API, as sluice calls it (``sluice debezium status``; the tests' and
benches' worker, runtime/connect.py): over http or https with a CA bundle, with basic auth
(Connect's BasicAuthSecurityRestExtension, or a gateway in front) or a bearer token.

```yaml
kafka_connect:                        # top level of sluice.yml (SLUICE_KAFKA_CONNECT_URL)
  url: https://connect:8443
  ca_file: certs/ca.pem               # the CA bundle the worker's certificate is checked against
  user: sluice                        # basic auth, optional
  password_env: SLUICE_CONNECT_PASSWORD   # or password_file (credentials.py)
  # token_env: SLUICE_CONNECT_TOKEN   # bearer auth instead (or token_file)
  timeout_s: 10
```

The mapping is the Schema Registry's (config/registry.py); errors name ``kafka_connect.<key>``
and what to do, and never the password or the token.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from python_ingest.config.registry import RegistryConfig, http_json
from python_ingest.config.secrets import redact
from python_ingest.exceptions import SluiceError

WHERE = "kafka_connect"
DOCS = "docs/security.md"


class ConnectRestError(SluiceError):
    """Kafka Connect's REST API refused or could not be reached; ``retry``: whether trying
    again may help (an outage, a worker still starting), not a certificate or a login."""

    def __init__(self, message: str, retry: bool = False) -> None:
        super().__init__(message)
        self.retry = retry


@dataclass(frozen=True)
class ConnectRest:
    """A client of one Connect worker's (or cluster's) REST API; no secret in its repr."""

    url: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    timeout_s: float = 10.0
    where: str = WHERE  # the config path messages name

    def __repr__(self) -> str:
        return f"ConnectRest(url={redact(self.url)!r}, user={self.user!r})"

    @classmethod
    def of(cls, config: RegistryConfig, where: str = WHERE) -> ConnectRest:
        """The client of a ``kafka_connect`` mapping (secrets read now, from env or file)."""
        return cls(config.url, config.user, config.secret(where), config.bearer(where),
                   config.ca_file, config.timeout_s, where)

    @property
    def shown_url(self) -> str:
        return redact(self.url, self.password, self.token)

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """``method`` ``path`` with a JSON ``body``; the JSON answer (None: empty or 404)."""
        data = None if body is None else json.dumps(body).encode()
        at = f"Kafka Connect's REST API at {self.shown_url}"
        try:
            return http_json(self.url.rstrip("/") + path, user=self.user,
                             password=self.password, token=self.token, ca_file=self.ca_file,
                             timeout_s=self.timeout_s, method=method, data=data,
                             headers={"Accept": "application/json",
                                      "Content-Type": "application/json"})
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):
                raise ConnectRestError(
                    f"{at} refused sluice ({exc.code} {exc.reason}): check {self.where}.user "
                    f"and its password_env or password_file (or {self.where}.token_env) in "
                    f"sluice.yml ({DOCS})") from None
            raise ConnectRestError(f"{at} answered {exc.code} {exc.reason} to {method} {path}",
                                   retry=exc.code >= 500) from None
        except (OSError, ValueError) as exc:  # refused, DNS, timeout, TLS, not JSON
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise ConnectRestError(
                    f"the TLS certificate of {at} is not trusted ({reason.verify_message}): "
                    f"set {self.where}.ca_file to the PEM bundle of the CA that signed it "
                    f"({DOCS})") from None
            if isinstance(reason, ssl.SSLError):
                raise ConnectRestError(
                    f"{at}: TLS failed ({reason.reason or reason}): is {self.where}.url's "
                    f"scheme (http or https) the worker's listener? ({DOCS})") from None
            raise ConnectRestError(
                f"{at} cannot be reached ({type(exc).__name__}: "
                f"{redact(str(reason), self.password, self.token)}): is the worker running, "
                f"and {self.where}.url right?", retry=True) from None

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def connectors(self) -> list[str]:
        return sorted(self.get("/connectors") or [])

    def status(self, connector: str) -> dict[str, Any]:
        """A connector's state and its tasks' (``GET /connectors/<name>/status``)."""
        found = self.get(f"/connectors/{urllib.parse.quote(connector, safe='')}/status")
        return dict(found or {})
