"""Table names: the one place that builds them, for Python and for dbt.

Every job owns these tables (namespaces are fixed and shared with dbt's models):

=====================  ==========================================  ============================
name                   what                                        written by
=====================  ==========================================  ============================
raw.<job>              decoded changelog rows, append only         ingest (checkpoint: offsets)
errors.<job>__raw      messages that could not be decoded          ingest
staging.<model>        the converter's output                      dbt (staging model)
staging.<model>__valid rows that passed the job's suite            fork
errors.<job>           rows that failed the suite or the merge     fork, merge
lake.<lake model>      the deduplicated, current table             merge (dbt lake model)
lake.<lake model>__history  one row per version of a key (history:   merge (steps/history*)
                       true on the lake model; python_ingest/steps/history/rules.py)
meta.<job>__index      each row key's ref key, deleted or not, per    merge
                       batch: the merge's global index (docs/index.md)
meta.<job>__tombstones deletes, before the index (read once to build  merge (before the
                       it; no longer written)                          index)
meta.sluice_merge__<m> one merge's change set (scratch)            merge
meta.runs              one row per run                             every run
=====================  ==========================================  ============================

The merge's names reach dbt as vars (``dbt_vars``): macros never rebuild them.
"""

from __future__ import annotations

from dataclasses import dataclass

from python_ingest.runtime.session import NAMESPACES

__all__ = ["NAMESPACES", "RUNS_TABLE", "JobModels", "JobTables"]
RUNS_TABLE = "meta.runs"


@dataclass(frozen=True)
class JobModels:
    """The dbt models of a job: its converter (staging) and its merged lake table."""

    staging: str  # model name, also the table staging.<name>
    lake: str | None  # model name, also the table lake.<name>


@dataclass(frozen=True)
class JobTables:
    """The tables of one job, from its name and (for the steps after ingest) its dbt models."""

    job: str
    models: JobModels | None = None

    @property
    def raw(self) -> str:
        return f"raw.{self.job}"

    @property
    def raw_errors(self) -> str:
        return f"errors.{self.job}__raw"

    @property
    def errors(self) -> str:
        return f"errors.{self.job}"

    @property
    def tombstones(self) -> str:
        return f"meta.{self.job}__tombstones"

    @property
    def index(self) -> str:
        return f"meta.{self.job}__index"

    @property
    def staging_model(self) -> str:
        if self.models is None:
            raise ValueError(f"the tables of job {self.job} were named without its dbt models")
        return self.models.staging

    @property
    def staging(self) -> str:
        return f"staging.{self.staging_model}"

    @property
    def valid(self) -> str:
        return f"staging.{self.staging_model}__valid"

    @property
    def lake(self) -> str | None:
        return f"lake.{self.models.lake}" if self.models and self.models.lake else None

    @property
    def history(self) -> str | None:
        """The lake model's history table (``history: true``): one row per version of a key,
        its schema in python_ingest/steps/history/rules.py."""
        return f"{self.lake}__history" if self.lake else None

    @property
    def merge_changes(self) -> str | None:
        """Scratch table holding one merge's change set (replaced by every merge)."""
        return f"meta.sluice_merge__{self.models.lake}" if self.models and self.models.lake \
            else None

    def all(self) -> tuple[str, ...]:
        """Every table the job may have (lake and history only with a lake model; callers check
        which exist)."""
        names = [self.raw, self.raw_errors]
        if self.models is not None:
            names += [self.staging, self.valid, self.errors]
            names += [self.lake, f"{self.lake}__history"] if self.lake else []
            names += [self.tombstones, self.index]
        return tuple(names)

    def step_tables(self) -> tuple[str, ...]:
        """The append-only step tables: a file or more per batch (``compact_files``)."""
        names = [self.raw, self.raw_errors]
        if self.models is not None:
            names += [self.staging, self.valid, self.errors]
        return tuple(names)

    def dbt_vars(self) -> dict[str, str]:
        """The names the lake merge's materialization and macros read as dbt vars."""
        return {"sluice_error_table": self.errors, "sluice_tombstone_table": self.tombstones,
                "sluice_index_table": self.index, "sluice_changes_table": self.merge_changes or ""}
