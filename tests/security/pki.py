"""A private certificate authority for the secured servers of the tests, made with openssl in a
temporary folder: a CA, a server certificate for 127.0.0.1/localhost, a client certificate
(mutual TLS, its key encrypted) and a second CA that signed nothing the servers show."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

KEY_PASSWORD = "client-key-pass"  # noqa: S105 - a test key's password


@dataclass(frozen=True)
class Pki:
    folder: Path
    ca: Path  # the CA's certificate (PEM)
    server_cert: Path
    server_key: Path  # unencrypted PKCS#8
    server_pem: Path  # key + certificate, as Kafka's PEM key store reads it
    client_cert: Path  # CN=sluice-client
    client_key: Path  # encrypted with KEY_PASSWORD
    client_key_plain: Path
    other_ca: Path  # a CA the servers' certificates do not chain to


def _run(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _signed(folder: Path, name: str, subject: str, ca: str, extensions: str) -> None:
    _run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=folder)
    (folder / f"{name}.ext").write_text(extensions)
    _run("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
         "-CAcreateserial", "-out", f"{name}.pem", "-days", "3", "-extfile", f"{name}.ext",
         cwd=folder)


def make_pki(folder: Path) -> Pki:
    folder.mkdir(parents=True, exist_ok=True)
    for ca in ("ca", "other-ca"):
        _run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "3", "-subj",
             f"/CN=sluice test {ca}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=folder)
    _signed(folder, "server", "/CN=localhost", "ca",
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    _signed(folder, "client", "/CN=sluice-client", "ca", "extendedKeyUsage=clientAuth\n")
    _run("pkcs8", "-topk8", "-in", "client.key", "-out", "client-encrypted.key", "-v2",
         "aes-256-cbc", "-passout", f"pass:{KEY_PASSWORD}", cwd=folder)
    _run("pkcs8", "-topk8", "-nocrypt", "-in", "server.key", "-out", "server-pk8.key",
         cwd=folder)
    (folder / "server-keystore.pem").write_text(
        (folder / "server-pk8.key").read_text() + (folder / "server.pem").read_text())
    for key in folder.glob("*.key"):
        key.chmod(0o600)
    return Pki(folder=folder, ca=folder / "ca.pem", server_cert=folder / "server.pem",
               server_key=folder / "server-pk8.key", server_pem=folder / "server-keystore.pem",
               client_cert=folder / "client.pem", client_key=folder / "client-encrypted.key",
               client_key_plain=folder / "client.key", other_ca=folder / "other-ca.pem")
