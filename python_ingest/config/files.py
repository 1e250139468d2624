"""File-partition sources (``source: files`` on a job): where the partitions land and how
much a run takes. See docs/files-source.md."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from python_ingest.config.checks import positive_int
from python_ingest.exceptions import ConfigError

SOURCES = ("kafka", "files", "debezium")  # debezium: a Kafka topic of Debezium events
# A files job's default max_bytes: its files are read on the driver (docs/files-source.md)
FILES_MAX_BYTES = 256 * 1024**2
# The job keys only a files job has (max_bytes is shared with Kafka jobs).
FILE_KEYS = frozenset({"path", "settle_seconds", "lease_timeout", "max_partitions",
                       "lateness_seconds"})


@dataclass(frozen=True)
class FileSourceConfig:
    """A landing dir of partitions (``dt=.../hour=.../part-*``) a files job ingests."""

    path: str  # absolute: the config's path resolved against the project root
    settle_seconds: float = 30.0  # no file change for this long: the partition is complete
    lease_timeout: float = 600.0  # a partition lease older than this is retaken
    max_partitions: int = 100  # per run, oldest first
    # processed partitions older than this are compacted into the watermark; a partition that
    # appears this much later than newer ones were processed is refused (docs/files-source.md)
    lateness_seconds: float = 7 * 24 * 3600.0


def _seconds(value: Any, field_name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(field_name, f"expected a number of seconds (0 or more), got {value!r}")
    return float(value)


def parse_files(raw: Mapping[str, Any], where: str, root: Path) -> FileSourceConfig:
    """Validate a files job's own keys (``where`` is ``jobs.<name>``)."""
    path = raw.get("path")
    if not isinstance(path, str) or not path:
        raise ConfigError(f"{where}.path", "is required for source: files",
                          "the landing dir of the dataset, relative to the project root "
                          "or absolute")
    landing = Path(path).expanduser()
    landing = landing if landing.is_absolute() else root / landing
    if landing.exists() and not landing.is_dir():
        raise ConfigError(f"{where}.path", f"{landing} is not a directory")
    d = FileSourceConfig
    timeout = _seconds(raw.get("lease_timeout", d.lease_timeout), f"{where}.lease_timeout")
    if timeout <= 0:
        raise ConfigError(f"{where}.lease_timeout", "must be more than 0 seconds",
                          "a run must finish reading a partition within it")
    return FileSourceConfig(
        path=str(landing),
        settle_seconds=_seconds(raw.get("settle_seconds", d.settle_seconds),
                                f"{where}.settle_seconds"),
        lease_timeout=timeout,
        max_partitions=positive_int(raw.get("max_partitions", d.max_partitions),
                                    f"{where}.max_partitions"),
        lateness_seconds=_seconds(raw.get("lateness_seconds", d.lateness_seconds),
                                  f"{where}.lateness_seconds"),
    )


def check_no_file_keys(raw: Mapping[str, Any], where: str) -> None:
    """A Kafka job with a files job's key is a mistake worth naming."""
    found = sorted(FILE_KEYS & set(raw))
    if found:
        raise ConfigError(f"{where}.{found[0]}", "is a setting of files jobs only",
                          "add 'source: files' or remove it")
