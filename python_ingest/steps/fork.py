"""The fork (Marmaray's ForkOperator): a staging batch → valid rows and error rows.

The staging model's Great Expectations suite (``expectations/<staging model>.json``) runs on
the new staging rows; each row failing any expectation becomes one row of ``errors.<job>``
listing every failed expectation and column, with the row as JSON; all other rows go to
``staging.<staging model>__valid``, the merge's input. The batch is computed once and
persisted, not re-read per output, so staging rows = valid rows + error rows exactly.

Which failures count: full rows are checked on every column; a partial update only on the
columns it changes (the others are NULL by design) and on sluice's ``_`` columns; a delete only
on sluice's ``_`` columns.

Both outputs commit with the checkpoint ``sluice.fork.batch_id``. The error table commits
first; on a rerun after a crash between the two commits, error rows of batches it already
holds are not written again.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from python_ingest.exceptions import PipelineError
from python_ingest.tables.checkpoints import step_checkpoint, write_options
from python_ingest.tables.iceberg import ensure_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

STEP = "fork"
ROW_ID = ("_kafka_partition", "_kafka_offset")  # unique per raw row, kept by converters
# errors.<job>: rows the fork or the merge rejected (the raw step's are in errors.<job>__raw)
ERROR_COLUMNS: tuple[tuple[str, str], ...] = (
    ("_row_key", "string"),
    ("_ref_key", "bigint"),
    ("_batch_id", "bigint"),
    ("_kafka_partition", "int"),
    ("_kafka_offset", "bigint"),
    ("error_step", "string"),
    ("error_exception", "string"),
    ("error_source_data", "string"),
    ("_errored_at", "timestamp"),
)


@dataclass(frozen=True)
class ForkResult:
    """What one fork did: the batches it covered and where the rows went."""

    batch_from: int  # exclusive
    batch_to: int  # inclusive; equal to batch_from when there was nothing new
    rows: int = 0
    valid: int = 0
    errors: int = 0
    quality: list[dict[str, Any]] = field(default_factory=list)
    report: str | None = None


def suite_path(root: Path, staging_model: str) -> Path:
    return root / "expectations" / f"{staging_model}.json"


def load_suite(path: Path) -> dict[str, Any]:
    """The suite as JSON (GE's own format: name, expectations[type, kwargs], meta)."""
    try:
        suite = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise PipelineError(f"expectation suite {path} is not valid JSON: {exc}") from exc
    if not isinstance(suite, dict) or not isinstance(suite.get("expectations"), list):
        raise PipelineError(f"expectation suite {path} needs a list 'expectations' of "
                            "{type, kwargs} objects (Great Expectations' suite format)")
    return suite


def fork(spark: SparkSession, staging_table: str, valid_table: str, error_table: str,
         suite_file: Path, report_dir: Path) -> ForkResult:
    """Fork the staging rows the valid table has not seen yet into valid and error rows."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    ensure_table(spark, error_table, ERROR_COLUMNS)
    staging = spark.table(staging_table)
    ensure_table(spark, valid_table, [(f.name, f.dataType.simpleString())
                                      for f in staging.schema.fields])
    done = step_checkpoint(spark, valid_table, STEP)
    errors_done = step_checkpoint(spark, error_table, STEP)
    target = staging.where(F.col("_batch_id") > done).agg(F.max("_batch_id")).collect()[0][0]
    if target is None:
        return ForkResult(done, done)
    batch = staging.where((F.col("_batch_id") > done) & (F.col("_batch_id") <= target))
    batch = batch.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        rows = batch.count()
        suite = load_suite(suite_file) if suite_file.is_file() else None
        if suite is None:
            log.warning("no expectation suite %s: every row of %s is valid", suite_file,
                        staging_table)
            failures, report = None, None
            quality: list[dict[str, Any]] = []
        else:
            failures, quality, report = _validate(spark, batch, suite, report_dir)
        error_rows = _error_rows(batch, failures)
        error_rows = error_rows.persist(StorageLevel.MEMORY_AND_DISK)
        errors = error_rows.count()
        valid_rows = batch.join(error_rows.select(*ROW_ID), list(ROW_ID), "left_anti")
        valid_rows = valid_rows.select(*spark.table(valid_table).columns)
        if errors:
            pending = error_rows.where(F.col("_batch_id") > errors_done)
            pending.select(*[n for n, _ in ERROR_COLUMNS]).writeTo(error_table).options(
                **write_options(STEP, target)).append()
        valid_rows.writeTo(valid_table).options(**write_options(STEP, target)).append()
        error_rows.unpersist()
    finally:
        batch.unpersist()
    for figures in quality:
        figures["passed"] = figures["checked"] - figures["unexpected"]
    result = ForkResult(done, int(target), rows, rows - errors, errors, quality, report)
    log.info("fork of %s batches %d..%d: %d rows, %d valid, %d errors in %s", staging_table,
             done + 1, target, rows, rows - errors, errors, error_table)
    return result


def _validate(spark: SparkSession, batch: DataFrame, suite: dict[str, Any],
              report_dir: Path) -> tuple[DataFrame, list[dict[str, Any]], str | None]:
    """Run the suite on the batch; failing (row id, expectation, column) rows, figures, docs."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")  # no phoning home
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    import great_expectations as gx
    from great_expectations.checkpoint import UpdateDataDocsAction
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    report_dir.mkdir(parents=True, exist_ok=True)
    context.add_data_docs_site(site_name="sluice", site_config={
        "class_name": "SiteBuilder",
        "store_backend": {"class_name": "TupleFilesystemStoreBackend",
                          "base_directory": str(report_dir)},
        "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
    })
    name = str(suite.get("name") or "suite")
    asset = context.data_sources.add_spark(name="sluice").add_dataframe_asset(name=name)
    definition = asset.add_batch_definition_whole_dataframe("new staging rows")
    try:
        gx_suite = context.suites.add(gx.ExpectationSuite(
            name=name, expectations=suite["expectations"], meta=suite.get("meta") or {}))
    except Exception as exc:  # GE raises several types for a bad expectation
        raise PipelineError(f"expectation suite '{name}' is invalid: {exc}") from exc
    validation = context.validation_definitions.add(
        gx.ValidationDefinition(name=name, data=definition, suite=gx_suite))
    checkpoint = context.checkpoints.add(gx.Checkpoint(
        name=f"{name} fork", validation_definitions=[validation],
        actions=[UpdateDataDocsAction(name="data docs", site_names=["sluice"])],
        result_format={"result_format": "COMPLETE",
                       "unexpected_index_column_names": list(ROW_ID)}))
    outcome = checkpoint.run(batch_parameters={"dataframe": batch})
    failures: list[tuple[int, int, str, str]] = []
    quality: list[dict[str, Any]] = []
    for run_result in outcome.run_results.values():
        for result in run_result.results:
            config = result.expectation_config
            if config is None:
                continue
            column = str(config.kwargs.get("column", ""))
            label = _label(config.type, config.kwargs)
            figures = result.result or {}
            if result.exception_info and result.exception_info.get("raised_exception"):
                raise PipelineError(f"expectation {label} could not run: "
                                    f"{result.exception_info.get('exception_message')}")
            quality.append({"expectation": label, "column": column,
                            "checked": int(figures.get("element_count") or 0),
                            "unexpected": int(figures.get("unexpected_count") or 0)})
            for index in figures.get("unexpected_index_list") or []:
                failures.append((int(index["_kafka_partition"]), int(index["_kafka_offset"]),
                                 label, column))
    sites = context.get_docs_sites_urls(site_names=["sluice"])
    report = str(sites[0]["site_url"]) if sites and sites[0].get("site_url") else None
    schema = "_kafka_partition int, _kafka_offset bigint, expectation string, column string"
    return spark.createDataFrame(failures, schema), quality, report


def _label(kind: str, kwargs: dict[str, Any]) -> str:
    shown = {k: v for k, v in kwargs.items() if k not in ("column", "batch_id", "result_format")}
    args = ", ".join(f"{k}={v!r}" for k, v in sorted(shown.items()))
    return f"{kind}({args})" if args else kind


def _error_rows(batch: DataFrame, failures: DataFrame | None) -> DataFrame:
    """One error row per staging row with a failure that counts (see the module doc)."""
    from pyspark.sql import functions as F

    if failures is None:
        return batch.sparkSession.createDataFrame([], ", ".join(
            f"`{n}` {t}" for n, t in ERROR_COLUMNS))
    rows = batch.alias("row").join(F.broadcast(failures.alias("failure")), list(ROW_ID))
    is_sluice_column = F.col("failure.column").startswith("_") | (F.col("failure.column") == "")
    counts = (
        is_sluice_column
        | (~F.col("row._is_deleted")
           & (F.col("row._changed_columns").isNull()
              | F.array_contains(F.col("row._changed_columns"), F.col("failure.column"))))
    )
    failed = rows.where(counts).groupBy(*ROW_ID).agg(
        F.array_sort(F.collect_set(F.when(
            F.col("failure.column") == "", F.col("failure.expectation")).otherwise(F.concat(
                F.col("failure.column"), F.lit(": "), F.col("failure.expectation"))))
        ).alias("failed"))
    return batch.join(failed, list(ROW_ID)).select(
        F.col("_row_key"), F.col("_ref_key"), F.col("_batch_id"), F.col("_kafka_partition"),
        F.col("_kafka_offset"), F.lit(STEP).alias("error_step"),
        F.concat(F.lit("failed expectations: "), F.array_join("failed", "; "))
        .alias("error_exception"),
        F.to_json(F.struct(*[F.col(c) for c in batch.columns if c != "failed"]))
        .alias("error_source_data"),
        F.current_timestamp().alias("_errored_at"),
    )
