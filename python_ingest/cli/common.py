"""What the commands share: the Spark session and the embedded broker, started on demand."""

from __future__ import annotations

from typing import TYPE_CHECKING

from python_ingest.config import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


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
