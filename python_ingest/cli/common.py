"""What the commands share: the Spark session and the embedded broker, started on demand; the
type of main.py's ``add`` that each module's commands register through, and their common flags."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from python_ingest.config import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Command = Callable[[argparse.Namespace, Settings], int]  # a command's body: its exit code
# main.py's ``add(name, body, help)``: a subcommand's parser, ready for its arguments
AddCommand = Callable[[str, Command, str], argparse.ArgumentParser]


def spark_session(settings: Settings) -> SparkSession:
    from python_ingest.runtime.session import build_session

    return build_session(settings)


def ensure_broker(settings: Settings, names: list[str] | None = None) -> None:
    """Start the embedded broker if configured, unless every job of ``names`` reads files."""
    from python_ingest.kafka import broker

    if names is not None and all(settings.job(n).files is not None for n in names):
        return
    if settings.broker.embedded and broker.start(settings):
        print(f"started the embedded broker on {settings.broker.bootstrap_servers}")


def add_history_flag(parser: argparse.ArgumentParser, when: str = "") -> None:
    """``--history`` of the commands that scaffold lake models (``when``: a condition, as the
    help's opening words)."""
    parser.add_argument("--history", action="store_true",
                        help=f"{when}each lake model keeps a history table too (history: true; "
                             "lake.<model>__history, every change a version; `sluice changes`; "
                             "docs/history.md)")
