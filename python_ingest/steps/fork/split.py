"""The fork (Marmaray's ForkOperator): converted rows → valid rows and error rows.

The staging model's Great Expectations suite (``expectations/<staging model>.json``) judges
the new converted rows in one Spark pass: the suite is compiled to SQL predicates
(steps/fork/expectations.py), every row is tagged with the expectations it failed, and one
aggregate counts them. Each row failing any expectation becomes one row of ``errors.<job>``
listing every failed expectation and column, with the row as JSON; all other rows are valid:
the merge's input. The tagged batch is computed once and persisted, so converted rows = valid
rows + error rows exactly, and no row id is collected on the driver. An expectation type
without a SQL form is validated by Great Expectations itself (a warning names it), its
failing rows matched by (``_batch_id``, ``_kafka_partition``, ``_kafka_offset``), unique across
batches for every source.

Which failures count: full rows are checked on every column; a partial update only on the
columns it changes (the others are NULL by design) and on sluice's ``_`` columns; a delete only
on sluice's ``_`` columns.

The report stays Great Expectations' Data Docs: a validation page per fork, rendered by Great
Expectations from the fork's own figures (``DocsJob``), off the batch's path when the caller
defers it (the runner builds it on its services thread), with a summary of what the fork did
on top (rows judged and rows routed per expectation, and the query listing them in the error
table). The pages load their scripts, styles and fonts from the report folder itself: the
copies vendored at set-up (``python_ingest.reports.assets``) are copied into
``<report dir>/static/vendor`` and the pages point there (``localize_pages``).

On the step tables' path (``fork``) both outputs commit with the checkpoint
``sluice.fork.batch_id``; the error table commits first, and on a rerun after a crash between
the two commits, error rows of batches it already holds are not written again. On the
runner's path (steps/batch.py) the valid rows go straight on to the merge.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from python_ingest.exceptions import PipelineError
from python_ingest.steps.fork.docs import (  # noqa: F401 (their names here too, as before)
    ASSETS_DIR_ENV,
    ASSETS_MANIFEST,
    ERROR_PREFIX,
    GX_LOCK,
    STEP,
    DocsJob,
    error_query,
    localize_pages,
    report_assets_home,
)
from python_ingest.steps.fork.expectations import (
    Compiled,
    compile_suite,
    failure_name,
    judged_rows,  # noqa: F401 (the fork's rows, named here too)
    judged_suite,  # noqa: F401
    label,
    quoted,
)
from python_ingest.steps.fork.expectations import load_suite as parse_suite
from python_ingest.tables.checkpoints import step_checkpoint, step_properties
from python_ingest.tables.formats import append, ensure_table, read_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

# unique per raw row across batches (a files job's partition and offset repeat in every
# batch: its file index and record number), kept by converters
ROW_ID = ("_batch_id", "_kafka_partition", "_kafka_offset")
# rows Great Expectations validates at once (the fallback): it brings each failing row's id
# to the driver, so this bounds what a batch where every row fails holds there
FALLBACK_ROWS_PER_PASS = 200_000
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
    page: str | None = None  # this batch's validation page (Data Docs)


def suite_path(root: Path, staging_model: str) -> Path:
    return root / "expectations" / f"{staging_model}.json"


def load_suite(path: Path) -> dict[str, Any]:
    """The suite as JSON (GE's own format: name, expectations[type, kwargs], meta)."""
    return parse_suite(path.read_text(), str(path))


@dataclass
class Split:
    """One pass of the suite over a batch: its valid rows and its error rows, two explicit
    outputs (both lazy over one persisted, tagged batch: ``release`` when written)."""

    valid: DataFrame
    errors: DataFrame  # ERROR_COLUMNS
    rows: int
    error_count: int
    quality: list[dict[str, Any]]
    docs: DocsJob | None
    _persisted: list[DataFrame] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)  # with valid rows (``per_batch``)
    partial_batches: set[int] = field(default_factory=set)  # with valid partial updates

    def commit_errors(self, spark: SparkSession, error_table: str, target: int) -> None:
        """Append the error rows of the batches ``error_table`` does not hold yet (a rerun
        after a crash between this commit and the next), with the fork checkpoint ``target``;
        nothing when no row failed or it holds them all."""
        from pyspark.sql import functions as F

        if not self.error_count:
            return
        done = step_checkpoint(spark, error_table, STEP)
        if target > done:
            append(self.errors.where(F.col("_batch_id") > done), error_table,
                   step_properties(STEP, target))

    def release(self) -> None:
        for frame in self._persisted:
            frame.unpersist()
        self._persisted.clear()


def _deterministic(frame: DataFrame) -> bool:
    """Whether every expression of ``frame``'s plan gives the same rows when run again."""
    return bool(frame._jdf.queryExecution().analyzed().deterministic())


def split(spark: SparkSession, batch: DataFrame, suite_file: Path, report_dir: Path | None,
          run_name: str, staging: str, valid_table: str, error_table: str,
          per_batch: bool = False, persist: bool = True) -> Split:
    """Judge ``batch`` (converted rows) by the suite in one Spark pass: each row tagged with
    the expectations it failed (steps/fork/expectations.py), the counts in one aggregate, the
    failing rows made error rows by the executors (nothing collected on the driver).
    ``per_batch``: the same aggregate says which batches have valid rows, and which of them
    valid partial updates (the merge's look-up of current rows). No report page is prepared
    when ``report_dir`` is None (``reports: false``). ``persist=False``: the tagged rows are
    computed again by each reader (the counts, the error rows, the valid rows' writers)
    instead of cached, for a pass over many rows whose readers each need a few columns (the
    direct bootstrap's: caching 10M wide rows cost more than its writes, docs/bootstrap.md);
    still cached when computing them again costs more or could differ (a uniqueness rule's
    window, Great Expectations' own validation, a nondeterministic converter)."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    suite = load_suite(suite_file) if suite_file.is_file() else None
    if suite is None:
        log.warning("no expectation suite %s: every row of %s is valid", suite_file, staging)
        suite = {"name": suite_file.stem, "expectations": []}
        compiled = Compiled()
    else:
        compiled = compile_suite(suite, batch.columns)
    tagged = batch
    fallback_results: list[Any] = []
    if compiled.fallback:
        names = ", ".join(str(e.get("type")) for e in compiled.fallback)
        log.warning("expectation suite %s: %s %s no SQL form in sluice; Great Expectations "
                    "validates %s on its own (slower: a Spark job or more each)", suite_file,
                    names, "has" if len(compiled.fallback) == 1 else "have",
                    "it" if len(compiled.fallback) == 1 else "them")
        with GX_LOCK:
            tagged, fallback_results = _validate_fallback(spark, batch, suite, compiled)
    for rule in compiled.rules:
        if rule.kind == "expect_column_values_to_be_unique":
            window = Window.partitionBy(F.col(quoted(rule.column)), F.expr(rule.judged))
            tagged = tagged.withColumn(f"__sluice_count_{rule.index}",
                                       F.count(F.lit(1)).over(window))
    failed = [F.when(F.expr(f"({r.judged}) AND ({r.unexpected})"), F.lit(r.failure))
              for r in compiled.rules]
    failures = F.array_sort(F.array_distinct(F.filter(
        F.concat(F.array(*failed, F.lit(None).cast("string")),
                 F.col("__sluice_fallback") if compiled.fallback
                 else F.array().cast("array<string>")),
        lambda x: x.isNotNull())))
    tagged = tagged.withColumn("__sluice_failed", failures)
    cached = persist or bool(compiled.fallback) or not _deterministic(tagged) \
        or any(r.kind == "expect_column_values_to_be_unique" for r in compiled.rules)
    if cached:
        tagged = tagged.persist(StorageLevel.MEMORY_AND_DISK)
    figures = [F.count(F.lit(1)).alias("rows"),
               F.count_if(F.size("__sluice_failed") > 0).alias("errors")]
    for r in compiled.rules:
        figures += [F.count_if(F.expr(r.judged)).alias(f"checked_{r.index}"),
                    F.count_if(F.expr(f"({r.judged}) AND ({r.unexpected})"))
                    .alias(f"unexpected_{r.index}")]
    for t in compiled.table_rules:
        figures.append(F.expr(t.ok).alias(f"ok_{t.index}"))
    if per_batch:
        is_valid = F.size("__sluice_failed") == 0
        partial = is_valid & F.col("_changed_columns").isNotNull() \
            & ~F.coalesce(F.col("_is_deleted"), F.lit(False))
        figures += [F.array_sort(F.collect_set(F.when(is_valid, F.col("_batch_id"))))
                    .alias("batches"),
                    F.collect_set(F.when(partial, F.col("_batch_id"))).alias("partial")]
    counted = tagged.agg(*figures).collect()[0]
    quality: list[dict[str, Any]] = []
    for r in compiled.rules:
        quality.append({"index": r.index, "expectation": r.label, "column": r.column,
                        "checked": int(counted[f"checked_{r.index}"]),
                        "unexpected": int(counted[f"unexpected_{r.index}"])})
    for t in compiled.table_rules:
        quality.append({"index": t.index, "expectation": t.label, "column": "",
                        "checked": int(counted["rows"]),
                        "unexpected": 0 if counted[f"ok_{t.index}"] else 1, "table": True})
    for result in fallback_results:
        quality.append(result["figures"])
    quality.sort(key=lambda q: q["index"])
    columns = list(batch.columns)
    valid = tagged.where(F.size("__sluice_failed") == 0).select(*columns)
    errors = tagged.where(F.size("__sluice_failed") > 0).select(
        F.col("_row_key"), F.col("_ref_key"), F.col("_batch_id"), F.col("_kafka_partition"),
        F.col("_kafka_offset"), F.lit(STEP).alias("error_step"),
        F.concat(F.lit(ERROR_PREFIX), F.array_join("__sluice_failed", "; "))
        .alias("error_exception"),
        F.to_json(F.struct(*[F.col(quoted(c)) for c in columns])).alias("error_source_data"),
        F.current_timestamp().alias("_errored_at"))
    docs = DocsJob(suite, quality, {r["figures"]["index"]: r["result"] for r in fallback_results},
                   report_dir, run_name, staging, valid_table, error_table) \
        if suite_file.is_file() and report_dir is not None else None
    return Split(valid, errors, int(counted["rows"]), int(counted["errors"]), quality, docs,
                 [tagged] if cached else [],
                 [int(b) for b in counted["batches"]] if per_batch else [],
                 {int(b) for b in counted["partial"]} if per_batch else set())


def fork(spark: SparkSession, staging_table: str, valid_table: str, error_table: str,
         suite_file: Path, report_dir: Path | None, defer: Callable[[DocsJob], None] | None = None
         ) -> ForkResult:
    """Fork the staging rows the valid table has not seen yet into valid and error rows
    (the step tables' path: ``keep_step_tables``, a plain ``dbt run``). The Data Docs page is
    built at once, or handed to ``defer``."""
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
    parts = split(spark, batch, suite_file, report_dir, f"batch-{done + 1}-{target}",
                  staging_table, valid_table, error_table)
    try:
        valid_columns = read_table(spark, valid_table).columns
        parts.commit_errors(spark, error_table, int(target))
        append(parts.valid.select(*valid_columns), valid_table,
               step_properties(STEP, int(target)))
    finally:
        parts.release()
    return finish_fork(parts, done, int(target), staging_table, error_table, defer)


def finish_fork(parts: Split, done: int, target: int, staging: str, error_table: str,
                defer: Callable[[DocsJob], None] | None = None) -> ForkResult:
    """The fork's result (per expectation: rows checked, failing, routed), its report built
    now or handed to ``defer``."""
    for figures in parts.quality:
        figures["passed"] = figures["checked"] - figures["unexpected"]
        figures["routed"] = 0 if figures.get("table") else figures["unexpected"]
    report = str(parts.docs.report_dir / "index.html") if parts.docs else None
    result = ForkResult(done, target, parts.rows, parts.rows - parts.error_count,
                        parts.error_count, parts.quality, report)
    if parts.docs is not None:
        parts.docs.result = result
        if defer is not None:
            defer(parts.docs)
        else:
            page = parts.docs.build()
            result = ForkResult(done, target, parts.rows, parts.rows - parts.error_count,
                                parts.error_count, parts.quality, report, page)
    log.info("fork of %s batches %d..%d: %d rows, %d valid, %d errors in %s", staging,
             done + 1, target, parts.rows, parts.rows - parts.error_count, parts.error_count,
             error_table)
    return result


def _validate_fallback(spark: SparkSession, batch: DataFrame, suite: dict[str, Any],
                       compiled: Compiled) -> tuple[DataFrame, list[dict[str, Any]]]:
    """Great Expectations' own validation of the expectations without a SQL form: the batch
    with ``__sluice_fallback`` (their failures per row, by the row's batch, partition and
    offset: unique across batches), and their results for the report.

    GE brings every failing row's id to the driver; so that a batch where every row fails
    cannot exhaust the driver, a batch of more than ``FALLBACK_ROWS_PER_PASS`` rows is
    validated in slices of about that many (by a hash of the row id), and each slice's
    failures are handed to Spark (checkpointed on the executors) before the next slice."""
    from pyspark.sql import functions as F

    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")  # no phoning home
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    import great_expectations as gx

    # (this module sets its own logger to INFO when imported: "Created temporary directory")
    logging.getLogger("great_expectations.data_context.types.base").setLevel(logging.WARNING)
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    name = str(suite.get("name") or "suite")
    asset = context.data_sources.add_spark(name="sluice").add_dataframe_asset(name=name)
    definition = asset.add_batch_definition_whole_dataframe("new staging rows")
    try:
        gx_suite = context.suites.add(gx.ExpectationSuite(
            name=name, expectations=compiled.fallback, meta=suite.get("meta") or {}))
    except Exception as exc:  # GE raises several types for a bad expectation
        raise PipelineError(f"expectation suite '{name}' is invalid: {exc}") from exc
    validation = context.validation_definitions.add(
        gx.ValidationDefinition(name=name, data=definition, suite=gx_suite))
    # GE orders its results its own way: each is matched to the suite by the id GE gave it
    position = {e.id: n for n, e in enumerate(gx_suite.expectations)}
    rows = batch.count()
    passes = max(1, -(-rows // FALLBACK_ROWS_PER_PASS))
    if passes > 1:
        log.info("expectation suite %s: Great Expectations validates %d rows in %d slices "
                 "(at most about %d failing row ids on the driver at once)", name, rows,
                 passes, FALLBACK_ROWS_PER_PASS)
    slot = F.pmod(F.xxhash64(*[F.col(c) for c in ROW_ID]), F.lit(passes))
    schema = "_batch_id bigint, _kafka_partition int, _kafka_offset bigint, failure string"
    results: dict[int, dict[str, Any]] = {}
    failed_parts: list[DataFrame] = []
    for k in range(passes):
        part = batch if passes == 1 else batch.where(slot == k)
        outcome = validation.run(batch_parameters={"dataframe": part}, result_format={
            "result_format": "COMPLETE", "unexpected_index_column_names": list(ROW_ID)})
        failures: list[tuple[int, int, int, str]] = []
        for result in outcome.results:
            n = _fallback_position(result, position, name)
            failure = _fallback_figures(result, compiled, n, results)
            for row in (result.result or {}).get("unexpected_index_list") or []:
                failures.append((int(row["_batch_id"]), int(row["_kafka_partition"]),
                                 int(row["_kafka_offset"]), failure))
            _forget_rows(result)
        if failures:
            # checkpointed on the executors: neither the list nor Spark's copy of it (the
            # parallelized collection) stays on the driver
            failed_parts.append(spark.createDataFrame(failures, schema).localCheckpoint())
        del failures
    ordered = [results[n] for n in sorted(results, key=lambda n: results[n]["figures"]["index"])]
    if not failed_parts:
        return batch.withColumn("__sluice_fallback", F.array().cast("array<string>")), ordered
    failed_rows = failed_parts[0]
    for more in failed_parts[1:]:
        failed_rows = failed_rows.unionByName(more)
    failed = failed_rows.groupBy(*ROW_ID).agg(F.collect_set("failure").alias("__sluice_fallback"))
    if passes == 1:
        failed = F.broadcast(failed)
    tagged = batch.join(failed, list(ROW_ID), "left").withColumn(
        "__sluice_fallback", F.coalesce("__sluice_fallback", F.array().cast("array<string>")))
    return tagged, ordered


def _fallback_position(result: Any, position: dict[Any, int], name: str) -> int:
    config = result.expectation_config
    n = position.get(config.id) if config is not None else None
    if n is None:
        raise PipelineError(f"Great Expectations returned a result for an expectation not "
                            f"in suite '{name}': {config}")
    return n


def _fallback_figures(result: Any, compiled: Compiled, n: int,
                      results: dict[int, dict[str, Any]]) -> str:
    """Add one slice's result of fallback expectation ``n`` to ``results`` (its figures
    summed over the slices, GE's own result of the first kept for the report); returns the
    name its failing rows are routed under, in the suite's own words (GE turns 2 into 2.0)."""
    index, own = compiled.fallback_index[n], compiled.fallback[n]
    kwargs = dict(own.get("kwargs") or {})
    column = str(kwargs.get("column") or "")
    name_ = label(str(own.get("type")), kwargs)
    figures = result.result or {}
    if result.exception_info and result.exception_info.get("raised_exception"):
        raise PipelineError(f"expectation {name_} could not run: "
                            f"{result.exception_info.get('exception_message')}")
    checked = int(figures.get("element_count") or 0)
    unexpected = int(figures.get("unexpected_count") or 0)
    if n not in results:
        results[n] = {"result": result, "figures": {
            "index": index, "expectation": name_, "column": column, "ge": True,
            "checked": 0, "unexpected": 0}}
    kept = results[n]
    kept["figures"]["checked"] += checked
    kept["figures"]["unexpected"] += unexpected
    shown = kept["result"].result
    if shown is not None and kept["result"] is not result:
        shown["element_count"] = kept["figures"]["checked"]
        shown["unexpected_count"] = kept["figures"]["unexpected"]
        total = kept["figures"]["checked"]
        shown["unexpected_percent"] = 100.0 * kept["figures"]["unexpected"] / total \
            if total else None
        kept["result"].success = kept["result"].success and result.success
    return failure_name(column, name_)


def _forget_rows(result: Any) -> None:
    """Drop GE's full lists from a result kept for the report (its partial lists stay)."""
    for key in ("unexpected_list", "unexpected_index_list", "unexpected_index_query"):
        if result.result:
            result.result.pop(key, None)
