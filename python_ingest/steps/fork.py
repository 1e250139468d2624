"""The fork (Marmaray's ForkOperator): a staging batch → valid rows and error rows.

The staging model's Great Expectations suite (``expectations/<staging model>.json``) runs on
the new staging rows; each row failing any expectation becomes one row of ``errors.<job>``
listing every failed expectation and column, with the row as JSON; all other rows go to
``staging.<staging model>__valid``, the merge's input. The batch is computed once and
persisted, not re-read per output, so staging rows = valid rows + error rows exactly.

Which failures count: full rows are checked on every column; a partial update only on the
columns it changes (the others are NULL by design) and on sluice's ``_`` columns; a delete only
on sluice's ``_`` columns. Great Expectations validates exactly those rows (each column
expectation gets the ``row_condition`` of ``judged_rows``), so its counts and Data Docs say
what the fork did; each batch's validation page also gets a summary of the fork's own figures
(rows judged and rows routed per expectation, and the query listing them in the error table).

The Data Docs pages load their scripts, styles and fonts from the report folder itself: the
copies vendored at set-up (``python_ingest.reports.assets``) are copied into
``<report dir>/static/vendor`` and the pages point there (``localize_pages``).

Both outputs commit with the checkpoint ``sluice.fork.batch_id``. The error table commits
first; on a rerun after a crash between the two commits, error rows of batches it already
holds are not written again.
"""

from __future__ import annotations

import html
import json
import logging
import os
import re
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from python_ingest.exceptions import PipelineError
from python_ingest.runtime.jars import repo_root
from python_ingest.tables.checkpoints import step_checkpoint, step_properties
from python_ingest.tables.formats import append, ensure_table, read_table

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
ERROR_PREFIX = "failed expectations: "
ASSETS_DIR_ENV = "SLUICE_REPORT_ASSETS_DIR"
ASSETS_MANIFEST = "manifest.json"
_GX_IMAGE = re.compile(r"https://great-expectations-web-assets\.s3[\w.-]*/([\w.-]+)[^\"'\s<>]*")
_CROSS_ORIGIN = re.compile(r'\s(?:integrity|crossorigin)="[^"]*"')
# Great Expectations keeps process-wide state (its context and data docs machinery): jobs
# forking in parallel threads of one runner validate one at a time
_GX_LOCK = threading.Lock()


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
    page: str | None = None  # this batch's validation page (Data Docs)


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


def judged_rows(column: str) -> str | None:
    """The rows the fork judges on ``column`` (Spark SQL), or None for every row: partial
    updates only on their changed columns, deletes only on sluice's ``_`` columns."""
    if not column or column.startswith("_"):
        return None
    return (f"NOT `_is_deleted` AND (`_changed_columns` IS NULL OR "
            f"array_contains(`_changed_columns`, {_sql_string(column)}))")


def judged_suite(expectations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The suite's expectations, each restricted to the rows the fork judges on its column."""
    judged = []
    for expectation in expectations:
        kwargs = dict(expectation.get("kwargs") or {})
        condition = judged_rows(str(kwargs.get("column") or ""))
        own = kwargs.get("row_condition")
        if condition and own is None:
            kwargs.update(row_condition=condition, condition_parser="spark")
        elif condition and isinstance(own, str) and kwargs.get("condition_parser") == "spark":
            kwargs["row_condition"] = f"({own}) AND {condition}"
        judged.append({**expectation, "kwargs": kwargs})
    return judged


def error_query(error_table: str, batch_from: int, batch_to: int, failure: str) -> str:
    """SQL listing the error rows of batches ``batch_from..batch_to`` that failed ``failure``
    (``column: expectation`` as in ``error_exception``)."""
    items = f"split(regexp_replace(error_exception, '^{ERROR_PREFIX}', ''), '; ')"
    return (f"select * from {error_table}\nwhere error_step = '{STEP}' and _batch_id between "
            f"{batch_from} and {batch_to}\n  and array_contains({items}, {_sql_string(failure)})")


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def report_assets_home() -> Path:
    """The vendored report assets: ``$SLUICE_REPORT_ASSETS_DIR`` or ``.sluice/report-assets``
    of the repository (they belong to the installation, like the jars)."""
    override = os.environ.get(ASSETS_DIR_ENV)
    return Path(override).expanduser() if override else repo_root() / ".sluice" / "report-assets"


def fork(spark: SparkSession, staging_table: str, valid_table: str, error_table: str,
         suite_file: Path, report_dir: Path) -> ForkResult:
    """Fork the staging rows the valid table has not seen yet into valid and error rows."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    ensure_table(spark, error_table, ERROR_COLUMNS)
    staging = read_table(spark, staging_table)
    ensure_table(spark, valid_table, [(f.name, f.dataType.simpleString())
                                      for f in staging.schema.fields])
    done = step_checkpoint(spark, valid_table, STEP)
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
            failures, report, page = None, None, None
            quality: list[dict[str, Any]] = []
        else:
            with _GX_LOCK:
                failures, quality, report, page = _validate(spark, batch, suite, report_dir,
                                                            f"batch-{done + 1}-{target}")
        valid_columns = read_table(spark, valid_table).columns
        if failures is None:  # no row failed (the usual batch): no routing to compute
            routed, errors = {}, 0
            append(batch.select(*valid_columns), valid_table, step_properties(STEP, target))
        else:
            routed = _routed(batch, failures)
            error_rows = _error_rows(batch, failures)
            error_rows = error_rows.persist(StorageLevel.MEMORY_AND_DISK)
            errors = error_rows.count()
            valid_rows = batch.join(error_rows.select(*ROW_ID), list(ROW_ID), "left_anti")
            if errors:
                errors_done = step_checkpoint(spark, error_table, STEP)
                pending = error_rows.where(F.col("_batch_id") > errors_done)
                append(pending.select(*[n for n, _ in ERROR_COLUMNS]), error_table,
                       step_properties(STEP, target))
            append(valid_rows.select(*valid_columns), valid_table,
                   step_properties(STEP, target))
            error_rows.unpersist()
    finally:
        batch.unpersist()
    for figures in quality:
        figures["passed"] = figures["checked"] - figures["unexpected"]
        figures["routed"] = routed.get(_failure(figures["column"], figures["expectation"]), 0)
    result = ForkResult(done, int(target), rows, rows - errors, errors, quality, report, page)
    if page:
        _summarize(Path(page), result, staging_table, valid_table, error_table)
    if report:
        localize_pages(report_dir)
    log.info("fork of %s batches %d..%d: %d rows, %d valid, %d errors in %s", staging_table,
             done + 1, target, rows, rows - errors, errors, error_table)
    return result


def _validate(spark: SparkSession, batch: DataFrame, suite: dict[str, Any], report_dir: Path,
              run_name: str
              ) -> tuple[DataFrame | None, list[dict[str, Any]], str | None, str | None]:
    """Run the suite on the batch; failing (row id, expectation, column) rows (None when no
    row failed), figures, the docs' index and this validation's page."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")  # no phoning home
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    import great_expectations as gx
    from great_expectations.checkpoint import UpdateDataDocsAction
    from great_expectations.core.run_identifier import RunIdentifier
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
            name=name, expectations=judged_suite(suite["expectations"]),
            meta=suite.get("meta") or {}))
    except Exception as exc:  # GE raises several types for a bad expectation
        raise PipelineError(f"expectation suite '{name}' is invalid: {exc}") from exc
    validation = context.validation_definitions.add(
        gx.ValidationDefinition(name=name, data=definition, suite=gx_suite))
    checkpoint = context.checkpoints.add(gx.Checkpoint(
        name=f"{name} fork", validation_definitions=[validation],
        actions=[UpdateDataDocsAction(name="data docs", site_names=["sluice"])],
        result_format={"result_format": "COMPLETE",
                       "unexpected_index_column_names": list(ROW_ID)}))
    outcome = checkpoint.run(batch_parameters={"dataframe": batch},
                             run_id=RunIdentifier(run_name=run_name))
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
    report, page = _site_url(context), None
    for key in outcome.run_results:
        url = _site_url(context, key)
        page = unquote(urlparse(url).path) if url else None
    schema = "_kafka_partition int, _kafka_offset bigint, expectation string, column string"
    rows = spark.createDataFrame(failures, schema) if failures else None  # None: all passed
    return rows, quality, report, page


def _site_url(context: Any, resource: Any = None) -> str | None:
    sites = context.get_docs_sites_urls(resource_identifier=resource, site_names=["sluice"])
    return str(sites[0].get("site_url") or "") or None if sites else None


def _label(kind: str, kwargs: dict[str, Any]) -> str:
    hidden = ("column", "batch_id", "result_format", "row_condition", "condition_parser")
    shown = {k: v for k, v in kwargs.items() if k not in hidden}
    args = ", ".join(f"{k}={v!r}" for k, v in sorted(shown.items()))
    return f"{kind}({args})" if args else kind


def _failure(column: str, expectation: str) -> str:
    """A failure as ``error_exception`` lists it."""
    return f"{column}: {expectation}" if column else expectation


def _counted(batch: DataFrame, failures: DataFrame) -> DataFrame:
    """The failures that count (see the module doc), as ``failure`` strings per row id."""
    from pyspark.sql import functions as F

    rows = batch.alias("row").join(F.broadcast(failures.alias("failure")), list(ROW_ID))
    is_sluice_column = F.col("failure.column").startswith("_") | (F.col("failure.column") == "")
    counts = (
        is_sluice_column
        | (~F.col("row._is_deleted")
           & (F.col("row._changed_columns").isNull()
              | F.array_contains(F.col("row._changed_columns"), F.col("failure.column"))))
    )
    return rows.where(counts).select(*ROW_ID, F.when(
        F.col("failure.column") == "", F.col("failure.expectation")).otherwise(F.concat(
            F.col("failure.column"), F.lit(": "), F.col("failure.expectation"))).alias("failure"))


def _routed(batch: DataFrame, failures: DataFrame) -> dict[str, int]:
    """Error rows per failure (``column: expectation``): what the fork routed for each."""
    counted = _counted(batch, failures).distinct().groupBy("failure").count().collect()
    return {str(r["failure"]): int(r["count"]) for r in counted}


def _error_rows(batch: DataFrame, failures: DataFrame) -> DataFrame:
    """One error row per staging row with a failure that counts (see the module doc)."""
    from pyspark.sql import functions as F

    failed = _counted(batch, failures).groupBy(*ROW_ID).agg(
        F.array_sort(F.collect_set("failure")).alias("failed"))
    return batch.join(failed, list(ROW_ID)).select(
        F.col("_row_key"), F.col("_ref_key"), F.col("_batch_id"), F.col("_kafka_partition"),
        F.col("_kafka_offset"), F.lit(STEP).alias("error_step"),
        F.concat(F.lit(ERROR_PREFIX), F.array_join("failed", "; "))
        .alias("error_exception"),
        F.to_json(F.struct(*[F.col(c) for c in batch.columns if c != "failed"]))
        .alias("error_source_data"),
        F.current_timestamp().alias("_errored_at"),
    )


def _summarize(page: Path, result: ForkResult, staging: str, valid: str, errors: str) -> None:
    """Put the fork's own figures for this batch at the top of its validation page."""
    e = html.escape
    batches = (f"batch {result.batch_to}" if result.batch_to == result.batch_from + 1
               else f"batches {result.batch_from + 1}..{result.batch_to}")
    rows, queries = [], []
    for n, q in enumerate(result.quality, 1):
        failure = _failure(q["column"], q["expectation"])
        link = "0"
        if q["routed"]:
            link = f'<a href="#sluice-query-{n}">{q["routed"]}</a>'
            query = error_query(errors, result.batch_from + 1, result.batch_to, failure)
            queries.append(f'<p id="sluice-query-{n}" class="mb-1">{e(failure)}:</p>'
                           '<pre class="border p-2" style="white-space: pre-wrap">'
                           f"{e(query)}</pre>")
        rows.append(f'<tr class="sluice-expectation" data-failure="{e(failure)}" '
                    f'data-checked="{q["checked"]}" data-routed="{q["routed"]}">'
                    f'<td>{e(q["column"])}</td><td><code>{e(q["expectation"])}</code></td>'
                    f'<td>{q["checked"]}</td><td>{link}</td></tr>')
    section = (
        f'<div id="sluice-fork" class="ge-section container-fluid mb-3 pl-sm-3 px-0" '
        f'data-rows="{result.rows}" data-valid="{result.valid}" data-errors="{result.errors}">'
        f'<div class="alert alert-secondary"><h4>What the fork did with {batches}</h4>'
        f'<p>{result.rows} rows of <code>{e(staging)}</code>: {result.valid} valid rows to '
        f'<code>{e(valid)}</code>, {result.errors} error rows to <code>{e(errors)}</code>. Full '
        "rows are checked on every column, partial updates only on the columns they change, "
        "deletes only on sluice's <code>_</code> columns: the results below are on exactly "
        "these rows. A row failing several expectations is one error row.</p>"
        '<table class="table table-sm"><thead><tr><th>column</th><th>expectation</th>'
        f'<th>rows checked</th><th>error rows in {e(errors)}</th></tr></thead><tbody>'
        + "".join(rows) + "</tbody></table>" + "".join(queries) + "</div></div>")
    text = page.read_text()
    anchor = '<div id="section-1" '
    text = (text.replace(anchor, section + anchor, 1) if anchor in text
            else re.sub(r"(<body[^>]*>)", lambda m: m[1] + section, text, count=1))
    page.write_text(text)


def localize_pages(report_dir: Path, home: Path | None = None) -> bool:
    """Point the Data Docs pages under ``report_dir`` at vendored copies of their assets
    (copied into ``<report_dir>/static/vendor``); False when set-up vendored none."""
    home = home or report_assets_home()
    manifest = home / ASSETS_MANIFEST
    if not manifest.is_file():
        log.warning("report assets are not vendored in %s (run `make setup`): the pages in %s "
                    "load them from CDNs", home, report_dir)
        return False
    vendor = report_dir / "static" / "vendor"
    copied, stamp = vendor / ASSETS_MANIFEST, vendor / ".localized"
    since = stamp.stat().st_mtime - 5 if stamp.is_file() else 0.0  # pages done before stay
    if not copied.is_file() or copied.read_bytes() != manifest.read_bytes():
        shutil.rmtree(vendor, ignore_errors=True)
        shutil.copytree(home, vendor)
        since = 0.0  # new copies: every page again
    stamp.touch()
    urls = json.loads(manifest.read_text())["urls"]
    images = report_dir / "static" / "images"
    for page in report_dir.rglob("*.html"):
        if vendor in page.parents or page.stat().st_mtime < since:
            continue
        text = page.read_text()
        if "://" not in text:
            continue
        static = Path(os.path.relpath(report_dir / "static", page.parent)).as_posix()
        new = text
        for url, path in urls.items():
            new = new.replace(f'"{url}"', f'"{static}/vendor/{path}"')
        for found in {m[0]: m[1] for m in _GX_IMAGE.finditer(new)}.items():
            name = found[1] if (images / found[1]).is_file() else "logo-long.png"
            new = new.replace(found[0], f"{static}/images/{name}")
        new = _CROSS_ORIGIN.sub("", new)  # a file:// page cannot load CORS-mode scripts
        if new != text:
            page.write_text(new)
    return True
