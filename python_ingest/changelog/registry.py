"""A Schema Registry over HTTP (Confluent's REST API): writer schemas by id, subjects by
TopicNameStrategy (``<topic>-value``).

The client is a frozen value pickled into Spark tasks with the job's schema: the driver loads
the subject's versions before a batch reads anything (an unreachable registry fails the batch
there, before any data moves), and a task that meets an id registered since fetches it itself.
Schemas by id are immutable, so each is fetched once per process (driver and every Python
worker) and kept for the process's life (``_BY_ID``). An id the registry does not hold (404) is
remembered for ``MISSING_RETRY_S`` only: it may be registered a moment later (a producer
registers, then writes), and a long-lived worker must then find it.

Plain ``urllib``: the Confluent API is a few GETs, and executors need nothing more installed.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from python_ingest.config.registry import RegistryConfig, http_json
from python_ingest.config.secrets import redact
from python_ingest.exceptions import SchemaRegistryError

ACCEPT = "application/vnd.schemaregistry.v1+json"
MISSING_RETRY_S = 30.0  # how long a 404 for an id is believed before asking again
_BY_ID: dict[tuple[str, int], dict[str, Any]] = {}  # (url, id): schema
_MISSING: dict[tuple[str, int], float] = {}  # (url, id): monotonic time of its 404
_BY_VERSION: dict[tuple[str, str, int], tuple[int, dict[str, Any]]] = {}
_LOCK = threading.Lock()


def subject_of(topic: str) -> str:
    """The value subject of a topic under TopicNameStrategy (Confluent's default)."""
    return f"{topic}-value"


@dataclass(frozen=True)
class RegistryClient:
    """Reads a Confluent-compatible Schema Registry; its password never shows in a repr."""

    url: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    timeout_s: float = 10.0
    ca_file: str | None = None  # https: the CA bundle (None: the system's)
    token: str | None = field(default=None, repr=False)  # bearer auth instead of basic
    where: str = "schema_registry"  # the config path messages name

    def __repr__(self) -> str:
        return f"RegistryClient(url={redact(self.url)!r}, user={self.user!r})"

    @classmethod
    def of(cls, config: RegistryConfig, where: str = "schema_registry") -> RegistryClient:
        """The client of a ``schema_registry`` mapping (``where`` names it in messages)."""
        return cls(config.url, config.user, config.secret(where), config.timeout_s,
                   config.ca_file, config.bearer(where), where)

    @property
    def shown_url(self) -> str:
        return redact(self.url, self.password)

    def _get(self, path: str) -> Any:
        """GET ``path`` as JSON; None for a 404; SchemaRegistryError when the registry cannot
        be reached or refuses (what the user must fix, naming the URL)."""
        try:
            return http_json(self.url + path, user=self.user, password=self.password,
                             token=self.token, ca_file=self.ca_file, timeout_s=self.timeout_s,
                             headers={"Accept": ACCEPT})
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):
                raise SchemaRegistryError(
                    f"the schema registry at {self.shown_url} refused sluice ({exc.code} "
                    f"{exc.reason}): check {self.where}.user and its password_env or "
                    f"password_file (or {self.where}.token_env) in sluice.yml; nothing was "
                    "read (docs/security.md)") from None
            raise SchemaRegistryError(
                f"the schema registry at {self.shown_url} answered {exc.code} {exc.reason} to "
                f"GET {path}: check the registry's health; nothing was read") from None
        except (OSError, ValueError) as exc:  # refused, DNS, timeout, not JSON
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise SchemaRegistryError(
                    f"the TLS certificate of the schema registry at {self.shown_url} is not "
                    f"trusted ({reason.verify_message}): set {self.where}.ca_file to the PEM "
                    "bundle of the CA that signed it; nothing was read "
                    "(docs/security.md)") from None
            raise SchemaRegistryError(
                f"the schema registry at {self.shown_url} cannot be reached "
                f"({type(exc).__name__}: {redact(str(reason), self.password)}): start it or fix "
                "schema_registry.url in sluice.yml, then run again; no data was read") from None

    def schema(self, sid: int) -> dict[str, Any] | None:
        """The Avro schema registered with id ``sid`` (None: the registry has none), fetched
        once per process; a 404 is asked again after ``MISSING_RETRY_S``."""
        key = (self.url, sid)
        with _LOCK:
            if key in _BY_ID:
                return _BY_ID[key]
            missing_at = _MISSING.get(key)
            if missing_at is not None and time.monotonic() - missing_at < MISSING_RETRY_S:
                return None
        found = self._get(f"/schemas/ids/{sid}")
        with _LOCK:
            if found is None:
                _MISSING[key] = time.monotonic()
                return None
            parsed = _avro(found, f"schema id {sid}")
            _BY_ID[key] = parsed
            _MISSING.pop(key, None)
        return parsed

    def versions(self, subject: str) -> dict[int, dict[str, Any]]:
        """Every version registered under ``subject``, by schema id (oldest first); empty when
        the subject does not exist. One request, plus one per version not seen before."""
        quoted = urllib.parse.quote(subject, safe="")
        numbers = self._get(f"/subjects/{quoted}/versions")
        found: dict[int, dict[str, Any]] = {}
        for number in sorted(numbers or []):
            key = (self.url, subject, int(number))
            with _LOCK:
                known = _BY_VERSION.get(key)
            if known is None:
                version = self._get(f"/subjects/{quoted}/versions/{int(number)}")
                if version is None:  # deleted since the listing
                    continue
                known = (int(version["id"]), _avro(version, f"{subject} v{number}"))
                with _LOCK:
                    _BY_VERSION[key] = known
                    _BY_ID[(self.url, known[0])] = known[1]
            found[known[0]] = known[1]
        return found


def _avro(answer: dict[str, Any], what: str) -> dict[str, Any]:
    kind = answer.get("schemaType", "AVRO")
    if kind != "AVRO":
        raise SchemaRegistryError(f"{what} is a {kind} schema: sluice reads Avro only")
    parsed = json.loads(answer["schema"])
    if not isinstance(parsed, dict):
        raise SchemaRegistryError(f"{what} is not an Avro record schema: {parsed!r:.80}")
    return parsed
