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


def jdbc_catalog_session(spark: Any, server: Any, folder: Path, **tls: str) -> Any:
    """A session with the Iceberg JDBC catalog of sluice.yml's ``catalog:`` (with ``tls``) on
    the TLS-only server: its catalog conf as sluice's own session gets it (runtime/session.py)."""
    import psycopg
    import yaml

    from python_ingest.config import load_settings
    from python_ingest.runtime.session import spark_conf
    from tests.conftest import STATE_DIR

    with psycopg.connect(server.dsn + " sslmode=require", autocommit=True) as conn:
        if not conn.execute("select 1 from pg_database where datname = 'c_tls'").fetchone():
            conn.execute("create database c_tls")
    config = folder / "sluice.yml"
    config.write_text(yaml.safe_dump({
        "table_format": "iceberg", "state_dir": str(STATE_DIR), "jobs": {},
        "catalog": {"name": "sluice", "type": "jdbc", "user": USER, "warehouse":
                    str(folder / "warehouse"),
                    "uri": f"postgresql://127.0.0.1:{server.port}/c_tls", **tls}}))
    settings = load_settings(config, env={})
    session = spark.newSession()
    for key, value in spark_conf(settings).items():
        if key.startswith(("spark.sql.catalog.", "spark.sluice.")) or key == \
                "spark.sql.defaultCatalog":
            session.conf.set(key, value)
    return session, settings


def test_an_iceberg_jdbc_catalog_works_over_tls(spark: Any, tls_postgres: Any, pki: Pki,
                                                tmp_path: Path) -> None:
    """Spark's catalog connection (Iceberg's JdbcCatalog, the PostgreSQL JDBC driver) and
    sluice's own read of the catalog's rows (tables/native.py, libpq) both verify the
    server's certificate by ``catalog.sslrootcert``; a table round-trips through it."""
    import psycopg

    from python_ingest.runtime.session import prepare_catalog
    from python_ingest.tables.native import NativeLake

    session, settings = jdbc_catalog_session(spark, tls_postgres, tmp_path,
                                             sslmode="verify-full", sslrootcert=str(pki.ca))
    assert session.conf.get("spark.sql.catalog.sluice.jdbc.sslmode") == "verify-full"
    prepare_catalog(session)  # sluice's namespaces, through the catalog
    session.sql("create table raw.tls_probe (id int, name string) using iceberg")
    session.sql("insert into raw.tls_probe values (1, 'a'), (2, 'b')")
    assert sorted(tuple(r) for r in session.sql("select * from raw.tls_probe").collect()) == \
        [(1, "a"), (2, "b")]
    with psycopg.connect(tls_postgres.dsn + " sslmode=require") as conn:
        backends = conn.execute("select s.ssl from pg_stat_ssl s join pg_stat_activity a "
                                "using (pid) where a.datname = 'c_tls'").fetchall()
    assert backends and all(ssl for (ssl,) in backends), backends  # the catalog's pool
    lake = NativeLake(tmp_path / "warehouse", "iceberg", settings.catalog)
    assert sorted(lake.read("raw.tls_probe").column("id").to_pylist()) == [1, 2]


def test_a_jdbc_catalog_with_the_wrong_ca_is_refused_naming_sslrootcert(
        spark: Any, tls_postgres: Any, pki: Pki, tmp_path: Path) -> None:
    from python_ingest.exceptions import SetupError
    from python_ingest.runtime.session import prepare_catalog
    from python_ingest.tables.native import NativeLake, NativeUnavailable

    session, settings = jdbc_catalog_session(spark, tls_postgres, tmp_path,
                                             sslmode="verify-full",
                                             sslrootcert=str(pki.other_ca))
    with pytest.raises(SetupError) as caught:
        prepare_catalog(session)
    message = str(caught.value)
    assert "catalog.sslrootcert" in message and "not trusted" in message, message
    with pytest.raises(NativeUnavailable, match="certificate verify failed"):
        NativeLake(tmp_path / "warehouse", "iceberg", settings.catalog).exists("raw.tls_probe")
