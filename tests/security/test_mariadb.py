"""TLS to a MariaDB source that takes TLS connections only (``require_secure_transport=ON``,
the tap's user ``REQUIRE SSL``; a second user ``REQUIRE X509``): every connection of the
source (server.connect: the tap's queries, bootstrap, verify, status; connection_settings: the
replication stream) goes over TLS as ``sslmode`` says, and a refusal names the setting."""

from __future__ import annotations

from typing import Any

import pytest

from python_ingest.config.sources import parse_source
from python_ingest.exceptions import SluiceError
from python_ingest.sources.binlog import server
from tests.security.pki import Pki

pytestmark = pytest.mark.secure


def source(tls_mariadb: Any, **tls: str) -> Any:
    raw = tls_mariadb.source_config(**tls)
    return parse_source("shop", raw)


def cipher(conn: Any) -> str:
    with conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        return str(cur.fetchone()[1])


@pytest.mark.parametrize("mode", ["require", "verify-ca", "verify-full"])
def test_each_sslmode_connects_over_tls(tls_mariadb: Any, pki: Pki, mode: str) -> None:
    src = source(tls_mariadb, sslmode=mode, sslrootcert=str(pki.ca))
    conn = server.connect(src)
    try:
        assert cipher(conn)  # a TLS session
    finally:
        conn.close()


def test_the_replication_stream_goes_over_tls(tls_mariadb: Any, pki: Pki) -> None:
    """The binlog reader connects with connection_settings: the user REQUIRE SSL gets in and
    the stream's events arrive."""
    from pymysqlreplication import BinLogStreamReader

    src = source(tls_mariadb, sslmode="verify-full", sslrootcert=str(pki.ca))
    with tls_mariadb.root() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS tlsrepl")
        cur.execute("CREATE TABLE tlsrepl.t (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO tlsrepl.t VALUES (1), (2)")
    stream = BinLogStreamReader(connection_settings=server.connection_settings(src),
                                server_id=4242, blocking=False, is_mariadb=False)
    try:
        events = [type(e).__name__ for e in stream]
    finally:
        stream.close()
    assert "WriteRowsEvent" in events, events


def test_a_plain_connection_is_refused_naming_sslmode(tls_mariadb: Any) -> None:
    with pytest.raises(SluiceError) as caught:
        server.connect(source(tls_mariadb, sslmode="disable"))
    message = str(caught.value)
    assert "sources.shop.sslmode" in message and "docs/security.md" in message, message
    assert tls_mariadb.tap_password not in message


def test_an_untrusted_certificate_is_refused_naming_sslrootcert(tls_mariadb: Any,
                                                                pki: Pki) -> None:
    with pytest.raises(SluiceError) as caught:
        server.connect(source(tls_mariadb, sslmode="verify-ca", sslrootcert=str(pki.other_ca)))
    message = str(caught.value)
    assert "sources.shop.sslrootcert" in message and "not trusted" in message, message


def test_a_client_certificate_logs_in_a_user_require_x509(tls_mariadb: Any, pki: Pki) -> None:
    with tls_mariadb.root() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE USER IF NOT EXISTS 'certuser'@'127.0.0.1' IDENTIFIED BY "
                    f"'{tls_mariadb.tap_password}' REQUIRE X509")
    base = {"sslmode": "verify-full", "sslrootcert": str(pki.ca), "user": "certuser"}
    with pytest.raises(SluiceError):
        server.connect(source(tls_mariadb, **base))  # no certificate: refused
    conn = server.connect(source(tls_mariadb, **base, sslcert=str(pki.client_cert),
                                 sslkey=str(pki.client_key_plain)))
    try:
        assert cipher(conn)
    finally:
        conn.close()
