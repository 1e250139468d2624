"""TLS to PostgreSQL (issue #61): a private server with ``ssl=on`` whose pg_hba.conf has only
``hostssl`` lines for TCP. The source's ``sslmode`` and files reach its connections (the
tap's queries, its replication connection, the snapshot, verify: sources/postgres/server.py),
and a dispersal target's DSN carries them to its connection."""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from python_ingest.config.dispersal import parse_dispersal
from python_ingest.config.sources import parse_source
from python_ingest.exceptions import SluiceError
from python_ingest.sinks.pgserver import USER
from tests.security.pki import Pki
from tests.servers import require_postgres

pytestmark = pytest.mark.secure


@pytest.fixture(scope="module")
def tls_postgres(pki: Pki) -> Iterator[Any]:
    from python_ingest.sinks.pgserver import LocalPostgres

    require_postgres()
    folder = Path(tempfile.mkdtemp(prefix="sluice-pgtls-", dir="/tmp"))  # its user reads it
    for name, source in (("server.crt", pki.server_cert), ("server.key", pki.server_key),
                         ("ca.crt", pki.ca)):
        shutil.copy(source, folder / name)
    (folder / "pg_hba.conf").write_text("local all all trust\n"
                                        "hostssl all all 127.0.0.1/32 trust\n"
                                        "hostssl replication all 127.0.0.1/32 trust\n")
    if os.geteuid() == 0:  # the server runs as postgres (or nobody): its key must be its own
        owner = next(u for u in ("postgres", "nobody") if _user(u))
        for path in (folder, *folder.iterdir()):
            shutil.chown(path, owner, owner)
    (folder / "server.key").chmod(0o600)
    server = LocalPostgres(settings=(
        "ssl=on", f"ssl_cert_file={folder / 'server.crt'}",
        f"ssl_key_file={folder / 'server.key'}", f"ssl_ca_file={folder / 'ca.crt'}",
        f"hba_file={folder / 'pg_hba.conf'}", "wal_level=logical")).start()
    yield server
    server.stop()
    shutil.rmtree(folder, ignore_errors=True)


def _user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def pg_source(server: Any, **tls: str) -> Any:
    return parse_source("pgshop", {"kind": "postgres", "host": "127.0.0.1", "port": server.port,
                                   "user": USER, "database": "postgres", **tls})


def over_tls(conn: Any) -> bool:
    with conn.cursor() as cur:
        cur.execute("select ssl from pg_stat_ssl where pid = pg_backend_pid()")
        return bool(cur.fetchone()[0])


@pytest.mark.parametrize("mode", ["require", "verify-full"])
def test_source_connections_go_over_tls(tls_postgres: Any, pki: Pki, mode: str) -> None:
    from python_ingest.sources.postgres import server

    source = pg_source(tls_postgres, sslmode=mode, sslrootcert=str(pki.ca))
    conn = server.connect(source)
    try:
        assert over_tls(conn)
    finally:
        conn.close()
    replication = server.replication_connect(source)  # the tap's stream
    replication.close()


def test_a_plain_connection_is_refused(tls_postgres: Any) -> None:
    from python_ingest.sources.postgres import server

    with pytest.raises(SluiceError) as caught:
        server.connect(pg_source(tls_postgres, sslmode="disable"))
    assert "no encryption" in str(caught.value), caught.value


def test_an_untrusted_certificate_is_refused(tls_postgres: Any, pki: Pki) -> None:
    from python_ingest.sources.postgres import server

    with pytest.raises(SluiceError) as caught:
        server.connect(pg_source(tls_postgres, sslmode="verify-full",
                                 sslrootcert=str(pki.other_ca)))
    assert "certificate verify failed" in str(caught.value), caught.value


def test_a_dispersal_target_dsn_carries_tls(tls_postgres: Any, pki: Pki, tmp_path: Path
                                            ) -> None:
    from python_ingest.sinks.postgres import connect

    dsn = (f"host=127.0.0.1 port={tls_postgres.port} user={USER} dbname=postgres "
           f"sslmode=verify-full sslrootcert={pki.ca}")
    (target,) = parse_dispersal({"pg": {"type": "postgres", "dsn": dsn, "table": "public.t"}},
                                "jobs.shop.dispersal", tmp_path).values()
    conn = connect(target, "jobs.shop.dispersal.pg")  # type: ignore[arg-type]
    try:
        assert over_tls(conn)
    finally:
        conn.close()
