"""The verify tests use the binlog tests' private MariaDB and tap environment."""

from tests.sources.binlog.conftest import database, mariadb, tap_env  # noqa: F401
