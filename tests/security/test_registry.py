"""The Schema Registry over HTTPS with basic or bearer auth (issue #61).

Apicurio Registry (the session's, tests/conftest.py) authenticates only through OpenID
Connect (a Keycloak), too heavy for a test: it sits here behind a small TLS-terminating proxy
that checks basic or bearer credentials and forwards the Confluent API's GETs, as a company's
gateway in front of its registry does. The registry's answers are Apicurio's own.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from python_ingest.changelog.registry import RegistryClient
from python_ingest.config.registry import parse_registry
from python_ingest.exceptions import SchemaRegistryError
from tests.security.conftest import secret_file
from tests.security.gateway import tls_gateway
from tests.security.pki import Pki

pytestmark = pytest.mark.secure

USER, PASSWORD, TOKEN = "sluice", "registry-pw-81c", "registry-token-3a9"
SCHEMA = {"type": "record", "name": "secured", "fields": [{"name": "id", "type": "long"}]}


@pytest.fixture(scope="module")
def https_registry(schema_registry: str, pki: Pki) -> Iterator[str]:
    """An https URL in front of the session's Apicurio, with auth; yields it."""
    allowed = {f"Basic {base64.b64encode(f'{USER}:{PASSWORD}'.encode()).decode()}",
               f"Bearer {TOKEN}"}
    with tls_gateway(pki, schema_registry, allowed) as url:
        yield url


@pytest.fixture(scope="module")
def registered(schema_registry: str) -> int:
    """The schema's id under subject ``secured-value`` in Apicurio."""
    body = json.dumps({"schema": json.dumps(SCHEMA)}).encode()
    request = urllib.request.Request(f"{schema_registry}/subjects/secured-value/versions",
                                     data=body, method="POST", headers={
                                         "Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return int(json.loads(answer.read())["id"])


def client(url: str, root: Path, **raw: Any) -> RegistryClient:
    return RegistryClient.of(parse_registry({"url": url, **raw}, "schema_registry", root))


@pytest.mark.parametrize("auth", ["basic", "bearer"])
def test_writer_schemas_over_https_with_auth(https_registry: str, registered: int, pki: Pki,
                                             tmp_path: Path, auth: str) -> None:
    login = ({"user": USER, "password_file": secret_file(tmp_path, "pw", PASSWORD)}
             if auth == "basic" else {"token_file": secret_file(tmp_path, "token", TOKEN)})
    registry = client(https_registry, tmp_path, ca_file=str(pki.ca), **login)
    assert registry.versions("secured-value") == {registered: SCHEMA}
    assert PASSWORD not in repr(registry) and TOKEN not in repr(registry)


def test_a_wrong_password_names_the_setting(https_registry: str, registered: int, pki: Pki,
                                            tmp_path: Path) -> None:
    registry = client(https_registry, tmp_path, ca_file=str(pki.ca), user=USER,
                      password_file=secret_file(tmp_path, "pw", "not-it-77"))
    with pytest.raises(SchemaRegistryError) as caught:
        registry.versions("secured-value")
    message = str(caught.value)
    assert "401" in message and "schema_registry.user" in message and "not-it-77" not in message


def test_an_untrusted_certificate_names_ca_file(https_registry: str, pki: Pki,
                                                tmp_path: Path) -> None:
    registry = client(https_registry, tmp_path, ca_file=str(pki.other_ca), token=TOKEN)
    with pytest.raises(SchemaRegistryError) as caught:
        registry.versions("secured-value")
    message = str(caught.value)
    assert "schema_registry.ca_file" in message and "not trusted" in message, message
    assert TOKEN not in message
