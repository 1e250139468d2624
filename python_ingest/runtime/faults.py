"""Fault points: crash tests kill a sluice process hard at a named point
(``$SLUICE_FAULT=<name>``), then check that a rerun ends where an uninterrupted run would."""

from __future__ import annotations

import logging
import os
import signal

log = logging.getLogger(__name__)

FAULT_ENV = "SLUICE_FAULT"


def fault_point(name: str) -> None:
    """Kill this process hard at a named point when $SLUICE_FAULT says so (crash tests)."""
    if os.environ.get(FAULT_ENV) == name:
        log.warning("fault injection: killing the process at '%s'", name)
        os.kill(os.getpid(), signal.SIGKILL)
