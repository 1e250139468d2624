"""TLS to a MySQL-family source: the source's ``sslmode`` and files (the names libpq gives
them, config/sources.py) as pymysql's options, for every connection to the server: the tap's
queries and its replication stream, bootstraps, ``sluice verify`` and the scaffold
(docs/security.md).

| sslmode                   | what the connection does                                        |
| ------------------------- | --------------------------------------------------------------- |
| (none), allow, prefer     | TLS when the server offers it, its certificate not checked      |
| disable                   | never TLS                                                       |
| require                   | TLS or no connection; the certificate checked only against      |
|                           | ``sslrootcert`` when one is given (as libpq does)                |
| verify-ca                 | TLS; the certificate must chain to ``sslrootcert``               |
| verify-full               | verify-ca, and the server's name must be the one in ``host``     |

``sslcert`` and ``sslkey``: a client certificate (a user created ``REQUIRE X509`` or
``REQUIRE SUBJECT``).
"""

from __future__ import annotations

from typing import Any

from python_ingest.config import SourceConfig
from python_ingest.config.secrets import redact


def options(source: SourceConfig) -> dict[str, Any]:
    """pymysql.connect's TLS keyword arguments for ``source``."""
    mode = source.sslmode
    if mode == "disable":
        return {"ssl_disabled": True}
    out: dict[str, Any] = {}
    if source.sslcert:
        out.update(ssl_cert=source.sslcert, ssl_key=source.sslkey)
    if mode in ("verify-ca", "verify-full") or (mode == "require" and source.sslrootcert):
        out.update(ssl_ca=source.sslrootcert, ssl_verify_cert=True,
                   ssl_verify_identity=mode == "verify-full")
    elif mode == "require" or out:  # TLS or nothing, the certificate unchecked
        out["ssl"] = {"verify_mode": False, "check_hostname": False, **(
            {"cert": source.sslcert, "key": source.sslkey} if source.sslcert else {})}
        out.pop("ssl_cert", None)
        out.pop("ssl_key", None)
    return out


def hint(source: SourceConfig, said: str) -> str:
    """What to do about a refused connection whose driver message is ``said`` ("" when TLS
    has nothing to do with it)."""
    where = f"sources.{source.name}"
    low = said.lower()
    if "certificate verify failed" in low or "certificate_verify_failed" in low:
        if "hostname" in low or "ip address mismatch" in low:
            return (f"the server's certificate does not name {source.host}: connect by a name "
                    f"it holds, or use {where}.sslmode verify-ca")
        return (f"the server's TLS certificate is not trusted: set {where}.sslrootcert to the "
                "PEM bundle of the CA that signed it")
    if "insecure transport" in low or "secure_transport" in low:
        return (f"the server accepts TLS connections only: set {where}.sslmode to require, "
                "verify-ca or verify-full (with sslrootcert)")
    if "access denied" in low and source.sslmode == "disable":
        return (f"with {where}.sslmode disable no TLS is tried: a user created REQUIRE SSL is "
                "refused so; set sslmode to verify-full (with sslrootcert), or check the "
                "password")
    if "ssl" in low or "tls" in low:
        return (f"TLS to the server failed: check {where}.sslmode, sslrootcert, sslcert and "
                "sslkey")
    return ""


def explain(source: SourceConfig, said: str) -> str:
    """The driver's message with its TLS hint, secrets masked."""
    found = hint(source, said)
    shown = redact(said)
    return f"{shown}. {found} (docs/security.md)" if found else shown
