"""Passwords inside connection strings: masked wherever one is shown (issue #35.5).

A DSN, URL or JDBC URL may carry its password: ``postgresql://user:pass@host/db``,
``jdbc:postgresql://host/db?user=u&password=pass``, ``host=h password=pass``. ``redact`` masks
the password of every such form in a text, and any known secret value anywhere in it; the
config types holding connection strings show them through it (``masked_repr``), and error
messages and log lines that quote a connection string or a driver's error do too.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

MASK = "***"

# [scheme://]user:password@host (the password runs up to the '@' before the host; without a
# scheme as in a Kafka bootstrap list, the user starts the text or follows a separator)
_URL_PASSWORD = re.compile(r"(?P<head>(?:[A-Za-z][A-Za-z0-9+.-]*://|(?<![^\s,;'\"(=]))"
                           r"[^:/?#@\s,;'\"]*:)(?!//)[^@\s]*(?=@)")
# password=value in a key=value DSN, a URL's query (?&) or a JDBC URL's ;-separated options
# (any key ending so: sslpassword, jdbc.password, api_token); a quoted value as libpq reads
# it ('it''s' or 'it\'s')
_KEY_PASSWORD = re.compile(
    r"(?P<head>(?<![\w.-])[\w.-]*?(?:password|passwd|pwd|secret|token)\s*=\s*)"
    r"(?:'(?:[^'\\]|\\.|'')*'|\"[^\"]*\"|[^\s&;,'\"]+)", re.IGNORECASE)
# conf keys whose values are secrets (Spark's own spark.redaction.regex, default)
SECRET_KEY = re.compile(r"secret|password|token|access[.]key", re.IGNORECASE)


def redact(text: str, *secrets: str | None) -> str:
    """``text`` with the password of every URL, JDBC URL and key=value DSN in it masked, and
    every occurrence of the given ``secrets`` (a password known apart from the text)."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, MASK)
    text = _URL_PASSWORD.sub(lambda m: m.group("head") + MASK, text)
    return _KEY_PASSWORD.sub(lambda m: m.group("head") + MASK, text)


def password_in(dsn: str) -> str | None:
    """The password a connection string carries itself (None: none), to mask it also where
    a driver's message quotes it in another shape (a fragment it could not parse)."""
    found = re.search(r"[A-Za-z][A-Za-z0-9+.-]*://[^:/?#@\s]*:([^@]*)@", dsn)
    if found is None:
        found = re.search(r"(?<![\w.-])(?:password|passwd|pwd)\s*=\s*('(?:[^'\\]|\\.)*'|[^\s&;]+)",
                          dsn, re.IGNORECASE)
    return found.group(1).strip("'") if found else None


def masked(value: Any) -> Any:
    """A config value as a repr may show it: text redacted, a mapping's secret keys masked."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {k: MASK if SECRET_KEY.search(str(k)) else masked(v) for k, v in value.items()}
    return value


def masked_repr(obj: Any) -> str:
    """The repr a dataclass would have, with every connection string's password masked
    (fields declared ``repr=False`` stay out). For config types holding a DSN or a URL."""
    shown = ", ".join(f"{f.name}={masked(getattr(obj, f.name))!r}"
                      for f in dataclasses.fields(obj) if f.repr)
    return f"{type(obj).__name__}({shown})"
