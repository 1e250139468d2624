"""What ``sluice verify`` needs of a source kind: the verify part of each kind's registry entry
(sources/tap/kinds.py names it as ``module:attribute``, since verify/ sits above sources/).
run.py does the rest the same for every kind: the ranges, bisection, row diff and settling
(compare.py)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from python_ingest.config import JobConfig, SourceConfig
from python_ingest.verify.compare import Target

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class SourceVerify(ABC):
    """One kind's side of a comparison: a connection whose transactions are consistent
    snapshots, the columns both sides hold, the position a snapshot stands at."""

    position_kind: ClassVar[str]  # what the source's positions are: "binlog", "LSN"

    @abstractmethod
    def connect(self, source: SourceConfig) -> Any:
        """A connection to read snapshots on (``rollback()`` ends one)."""

    @abstractmethod
    def resolve_target(self, spark: SparkSession, conn: Any, source: SourceConfig,
                       job: JobConfig, lake_table: str, db: str, table: str) -> Target:
        """The columns both sides hold (the key first), with their types on each side."""

    @abstractmethod
    def snapshot(self, conn: Any) -> str:
        """Start the snapshot the comparison reads; returns the position it stands at."""

    @abstractmethod
    def estimate(self, conn: Any, db: str, table: str) -> int:
        """About how many rows the table holds (for the first ranges)."""
