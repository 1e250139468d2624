"""Bootstrap's snapshot position (issue #9.6): a commit at the moment the snapshot starts is
in the lake exactly once, on MariaDB (binlog_snapshot_position) and on the MySQL path."""

from __future__ import annotations

from collections import Counter

import pytest

from python_ingest.exceptions import SluiceError
from python_ingest.sources.binlog import bootstrap as bootstrap_mod

BOOT_USER = "sluice_boot"  # the tap's grants plus RELOAD (FLUSH TABLES WITH READ LOCK, MySQL)


def _boot_user(env) -> None:
    with env.server.root() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE USER IF NOT EXISTS '{BOOT_USER}'@'127.0.0.1' IDENTIFIED BY "
                    f"'{env.server.tap_password}'")
        cur.execute("GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT, RELOAD ON *.* TO "
                    f"'{BOOT_USER}'@'127.0.0.1'")


def _lake_values(env, table: str) -> Counter[str]:
    return Counter(str(row["v"]) for row in env.oracle(table).values())


def _bootstrap_with_a_commit_at_the_snapshot(env, monkeypatch) -> None:
    env.sql("CREATE TABLE t (v VARCHAR(10))")  # no key: a full-row identity counts copies
    env.sql("INSERT INTO t VALUES ('a'), ('a'), ('b')")
    env.add_jobs()
    fired: list[bool] = []

    def commit_now() -> None:
        if not fired:
            fired.append(True)
            env.sql("INSERT INTO t VALUES ('c'), ('a')")

    monkeypatch.setattr(bootstrap_mod, "BEFORE_SNAPSHOT", [commit_now])
    settings = env.settings()
    bootstrap_mod.bootstrap(settings, settings.source(env.source), f"{env.database}.t",
                            workers=1, progress=lambda _line: None)
    assert fired
    env.tap_until_end()


@pytest.mark.reliability
@pytest.mark.parametrize("kind", ["mysql", "mariadb"])
def test_a_commit_as_the_bootstrap_snapshot_starts_lands_exactly_once(tap_env, monkeypatch,
                                                                      kind: str) -> None:
    env = tap_env
    _boot_user(env)
    env.write_config(kind=kind, user=BOOT_USER)
    _bootstrap_with_a_commit_at_the_snapshot(env, monkeypatch)
    assert _lake_values(env, "t") == Counter({"a": 3, "b": 1, "c": 1})


@pytest.mark.reliability
def test_the_mysql_snapshot_without_reload_fails_naming_the_grant(tap_env) -> None:
    env = tap_env
    env.write_config(kind="mysql")  # the tap's user: no RELOAD
    env.sql("CREATE TABLE k (id INT PRIMARY KEY)")
    settings = env.settings()
    with pytest.raises(SluiceError, match="RELOAD"):
        bootstrap_mod.bootstrap(settings, settings.source(env.source), f"{env.database}.k",
                                workers=1, progress=lambda _line: None)
