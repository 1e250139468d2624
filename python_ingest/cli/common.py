"""What the commands share: the Spark session and the embedded broker, started on demand; the
type of main.py's ``add`` that each module's commands register through, their common flags, and
how ``sluice verify`` and ``sluice verify --history`` print a comparison."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

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


def print_comparison(name: str, equal: bool, differing: int, what: str,
                     differences: Sequence[Any], show: int, notes: Sequence[str] = ()) -> None:
    """One job's comparison as ``sluice verify`` prints it: the verdict and ``what`` was
    compared, the ``notes``, the first ``show`` of the ``differences`` (each a key, its kind
    and the columns that differ), then how many more of the ``differing`` keys there are."""
    verdict = "EQUAL" if equal else f"DIFFERENT ({differing} keys)"
    print(f"{name}: {verdict}: {what}")
    for note in notes:
        print(f"  {note}")
    for diff in differences[:show]:
        detail = f" columns: {', '.join(diff.columns)}" if diff.columns else ""
        print(f"  {diff.kind:<8} key {diff.key}{detail}")
    if differing > show:
        print(f"  ... and {differing - show} more (--show N, --json)")
