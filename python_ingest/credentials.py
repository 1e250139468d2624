"""Source passwords: where they come from, and that they never show (issue #9.13).

A source's password comes from one of (docs/binlog-tap.md, "Configuration"):

- ``password_env``: the name of an environment variable holding it;
- ``password_file``: a file holding it (relative to the config file; one trailing newline is
  not part of the password), e.g. a mounted Kubernetes/Docker secret;
- ``password``: plaintext in sluice.yml, accepted with a warning (the file ends up in
  repositories, backups and screen shares).

The value is read only when a connection is opened (``reveal``), is excluded from every
``repr`` (``SourceConfig`` declares it with ``repr=False``), and no message of this module
quotes it: errors name the field, the variable or the file instead.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from python_ingest.exceptions import ConfigError

log = logging.getLogger(__name__)

FIELDS = ("password", "password_env", "password_file")


def check(where: str, raw: Mapping[str, Any], root: Path) -> str | None:
    """Check a source's password fields; returns ``password_file`` resolved against the config
    file's folder. Several ways at once is an error; plaintext is accepted with a warning."""
    given = [f for f in FIELDS if raw.get(f) is not None]
    if len(given) > 1:
        raise ConfigError(f"{where}.{given[0]}", f"give the password one way, not {given}",
                          "password_env or password_file")
    if "password" in given:
        log.warning("%s.password: a plaintext password in the config file; use password_env "
                    "(an environment variable) or password_file (a file only the tap's user "
                    "can read) instead (docs/binlog-tap.md)", where)
    file = raw.get("password_file")
    return None if file is None else str(root / Path(str(file)).expanduser())


def reveal(where: str, password: str | None, env: str | None, file: str | None) -> str:
    """The password itself, for opening a connection; never log or wrap it in a message."""
    if env:
        value = os.environ.get(env)
        if value is None:
            raise ConfigError(f"{where}.password_env", f"environment variable {env} is not set")
        return value
    if file:
        try:
            text = Path(file).read_text()
        except OSError as exc:
            raise ConfigError(f"{where}.password_file",
                              f"cannot read the password file {file}: {exc.strerror}") from None
        return text[:-1] if text.endswith("\n") else text
    return password or ""
