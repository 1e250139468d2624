"""Managed PostgreSQL servers (issue #50.14): replication granted through RDS's
rds_replication role, TLS settings on every connection, and a database whose encoding is not
UTF-8."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.postgres_source, pytest.mark.reliability]


def test_membership_in_rds_replication_is_replication_privilege(pg_env) -> None:
    from python_ingest.exceptions import TapError
    from python_ingest.sources.postgres import server
    from tests.sources.postgres.support import admin

    env = pg_env
    member, plain = f"rds_{env.database}", f"plain_{env.database}"
    with admin(env.server) as conn, conn.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_roles WHERE rolname = 'rds_replication'")
        if not cur.fetchall():
            cur.execute("CREATE ROLE rds_replication NOLOGIN")
        cur.execute(f"CREATE ROLE {member} LOGIN IN ROLE rds_replication")
        cur.execute(f"CREATE ROLE {plain} LOGIN")
    try:
        for user, allowed in ((member, True), (plain, False)):
            env.write_config(user=user)
            source = env.settings().source(env.source)
            conn = server.connect(source)
            try:
                if allowed:
                    server.check_server(conn, source)  # passes: rds_replication's member
                else:
                    with pytest.raises(TapError, match=f"GRANT rds_replication TO {plain}"):
                        server.check_server(conn, source)
            finally:
                conn.close()
    finally:
        with admin(env.server) as conn, conn.cursor() as cur:
            cur.execute(f"DROP ROLE {member}")
            cur.execute(f"DROP ROLE {plain}")


def test_tls_settings_reach_every_connection(pg_env) -> None:
    """The private cluster has no TLS: ``sslmode: require`` must make the tap's connections
    fail saying so (the setting reached libpq), ``disable`` must work; files are relative to
    the config file."""
    from python_ingest.exceptions import TapError
    from python_ingest.sources.postgres import server

    env = pg_env
    env.write_config(sslmode="require", sslrootcert="ca.pem")
    source = env.settings().source(env.source)
    assert source.sslrootcert == str(env.config.parent / "ca.pem")
    for connect in (server.connect, server.replication_connect):
        with pytest.raises(TapError, match="SSL"):
            connect(source)
    env.source_overrides.pop("sslrootcert")
    env.write_config(sslmode="disable")
    conn = server.connect(env.settings().source(env.source))
    assert conn.get_dsn_parameters()["sslmode"] == "disable"
    conn.close()


def test_a_latin1_database_is_tapped(pg_env) -> None:
    """The server sends text in the client encoding: UTF-8 on every connection, whatever the
    database's (the decoder reads UTF-8; a LATIN1 database crash-looped it)."""
    from tests.sources.postgres.support import recreate_database

    env = pg_env
    recreate_database(env, "LATIN1")
    env.sql("CREATE TABLE cafes (id int PRIMARY KEY, name text, note varchar(20))")
    env.add_jobs()
    env.tap_until_end()
    env.sql("INSERT INTO cafes VALUES (1, 'Café Noir', 'crème brûlée'), (2, 'naïve', 'øre')",
            "UPDATE cafes SET note = 'À la carte' WHERE id = 2")
    env.tap_until_end()
    assert env.assert_equal("cafes") == 2
    assert {r["name"] for r in env.oracle("cafes").values()} == {"Café Noir", "naïve"}


def test_a_sql_ascii_database_is_refused_at_start_saying_what_to_do(pg_env) -> None:
    """#58.4: SQL_ASCII stores bytes unchecked and unconverted, so a value that is not UTF-8
    reached the decoder and crash-looped the tap (a UnicodeDecodeError at every start). The tap
    and the bootstrap refuse such a database at start, saying how to move it to UTF8."""
    from python_ingest.exceptions import TapError
    from tests.sources.postgres.support import recreate_database

    env = pg_env
    recreate_database(env, "SQL_ASCII")
    env.sql("CREATE TABLE notes (id int PRIMARY KEY, body text)")
    env.add_jobs()
    with pytest.raises(TapError, match="encoding SQL_ASCII") as info:
        env.tap_until_end()
        env.sql("INSERT INTO notes VALUES (1, convert_from('\\x636166e9', 'SQL_ASCII'))")
        env.tap_until_end()  # (before: UnicodeDecodeError, at this start and every next one)
    assert "createdb -E UTF8" in str(info.value) and "pg_dump -E" in str(info.value)
    with pytest.raises(TapError, match="encoding SQL_ASCII"):
        env.bootstrap_all()
