"""The servers the tests start privately (MariaDB, PostgreSQL, Chromium) and what a missing
binary means: on a developer's machine the tests that need it are skipped, saying which Debian
package to install; under CI (``CI=true``, as CI services set it) it is a failure, so a CI run
is never green without its servers (`make setup` installs all three)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CI_VALUES = ("true", "1", "yes")


def in_ci() -> bool:
    """Whether this run is CI's (``CI=true``): a missing server then fails it."""
    return os.environ.get("CI", "").strip().lower() in CI_VALUES


def require_binary(path: str | Path | None, package: str) -> Path:
    """``path`` when it is an existing file; else skip the test (fail it under CI), naming
    ``package``, the Debian package that installs the binary."""
    if path is not None and Path(path).is_file():
        return Path(path)
    where = f" ({path})" if path is not None else ""
    message = (f"the server binary{where} of Debian's {package} is missing: install it with "
               f"'apt-get install {package}' (or 'make setup')")
    if in_ci():
        pytest.fail(f"{message}; CI=true, so a missing server fails the run instead of "
                    "skipping its tests", pytrace=False)
    pytest.skip(message)


def require_postgres() -> Path:
    """PostgreSQL's ``initdb`` (python_ingest/sinks/pgserver.py finds the newest server)."""
    from python_ingest.sinks.pgserver import find_bin

    bin_dir = find_bin()
    return require_binary(bin_dir / "initdb" if bin_dir else None, "postgresql")


def require_mariadb() -> Path:
    """The ``mariadbd`` the binlog tests start (python_ingest/sources/binlog/server.py)."""
    from python_ingest.sources.binlog.server import find_mariadbd

    return require_binary(find_mariadbd(), "mariadb-server")


def require_fixture_servers(item: pytest.Item) -> None:
    """For ``pytest_runtest_setup``: check the binaries of the server fixtures ``item`` uses
    before any fixture starts (the ``postgres`` fixture lives in tests/conftest.py)."""
    names = set(getattr(item, "fixturenames", ()))
    if "postgres" in names:
        require_postgres()
    if "mariadb" in names:
        require_mariadb()
