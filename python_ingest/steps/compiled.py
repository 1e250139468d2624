"""A job's converter and lake model as SQL with the batch's placeholders, compiled by dbt
(steps/batch.py runs them per batch, steps/bulk.py in bulk), and a new lake created from them
as the lake_merge materialization would create it on a first batch.

dbt stays where users author: ``dbt compile`` on the parsed project with var
``sluice_compile`` (``sluice_new_batches`` and ``sluice_partial_keys`` leave placeholders),
compiled again when a model, macro or var changes, or when the raw or lake columns do.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from python_ingest.config.table_formats import session_format
from python_ingest.exceptions import PipelineError
from python_ingest.runtime.catalog import (
    bucket_write,
    keep_write_settings,
    lake_properties,
    location,
)
from python_ingest.steps.merge.index import ensure_index
from python_ingest.tables.lease import check_held

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from python_ingest.steps.dbt import Dbt
    from python_ingest.tables.names import JobTables

log = logging.getLogger(__name__)

BATCH_FROM, BATCH_TO = "__SLUICE_BATCH_FROM__", "__SLUICE_BATCH_TO__"
BATCH_ID, PARTIAL_KEYS = "__SLUICE_BATCH_ID__", "__SLUICE_PARTIAL_KEYS__"
VALID = "__SLUICE_VALID__"  # the valid rows (a view of the batch's)
CONSTRAINTS = "spark.sql.constraintPropagation.enabled"
LAKE_BOOKKEEPING = ("_merge_action", "_rejected")


@dataclass(frozen=True)
class CompiledJob:
    """A job's converter and lake model as SQL, with the batch's placeholders."""

    key: str
    converter: str  # reads raw batches BATCH_FROM..BATCH_TO
    change_set: str  # one batch (BATCH_ID) of the valid rows (the ``valid`` relation)
    valid: str  # the compiled SQL's name of the valid rows (replaced by a view)
    lake_columns: frozenset[str] = frozenset()  # (lowercase) when it was compiled


def new_lake_index(dbt: Dbt, tables: JobTables) -> dict[str, str]:
    """The bucket settings a new lake of this job takes from its model's config (lake_index,
    lake_buckets, keep_tombstones: checked by ``Dbt.job_models``); empty for the record-level
    index (macros/sluice_lake_index.sql answers the same for a plain `dbt run`)."""
    models = tables.models
    config = dbt.model_config(models.lake) if models is not None and models.lake else None
    if config is None or config.get("lake_index", "bucket") == "record" \
            or config.get("keep_tombstones", False):
        return {}
    return bucket_write(int(config.get("lake_buckets", 4)))


def _compile(spark: SparkSession, dbt: Dbt, tables: JobTables, has_target: bool
             ) -> tuple[str, str, DataFrame]:
    """The converter's and the lake model's SQL with the batch's placeholders (the lake
    model's as it reads the lake, or as for its first batch), and the converter's empty
    result (its columns)."""
    models = tables.models
    assert models is not None and models.lake is not None
    converter = dbt.compiled(models.staging, {"sluice_compile": True})
    if BATCH_FROM not in converter:
        raise PipelineError(
            f"converter {models.staging} does not filter its raw rows with "
            "{{ sluice_new_batches() }}: put it in its import CTE (docs/write-a-converter.md)")
    converted = converted_rows(spark, converter.replace(BATCH_FROM, "0").replace(BATCH_TO, "-1"),
                           tables)
    columns = {f.name: f.dataType.simpleString() for f in converted.schema}
    change_set = dbt.compiled(models.lake, {
        "sluice_compile": True, "sluice_batch_id": BATCH_ID, "sluice_skip": [],
        "sluice_has_target": has_target, "sluice_changes_columns": columns,
        **tables.dbt_vars()})
    if VALID not in change_set:
        raise PipelineError(f"lake model {models.lake} does not read its changes through "
                            "sluice_merge_changes (or sluice_merge_all_columns): the batch "
                            "path cannot run it (docs/write-a-converter.md)")
    return converter, change_set, converted


def create_lake(spark: SparkSession, dbt: Dbt, tables: JobTables) -> None:
    """A new lake created as the lake_merge materialization creates it on a first batch
    (macros/materializations/sluice_apply_change_set.sql): the change set's columns (the lake
    model's SQL as for a first batch, analysed, not run) without the merge's bookkeeping,
    with _merged_at (and Hudi's delete flag); the model's properties; on Hudi its bucket
    settings kept beside it and an empty first commit with no merge checkpoint (a kill before
    the first merge's commit leaves every batch to merge)."""
    lake = tables.lake
    assert lake is not None
    _, change_set, converted = _compile(spark, dbt, tables, has_target=False)
    ensure_index(spark, tables)  # the change set reads it
    view = f"sluice_shape__{tables.job}"
    converted.createOrReplaceTempView(view)
    sql = (change_set.replace(VALID, view).replace(BATCH_ID, "0")
           .replace(PARTIAL_KEYS, "NULL"))
    before = str(spark.conf.get(CONSTRAINTS, "true"))
    spark.conf.set(CONSTRAINTS, "false")
    try:
        schema = spark.sql(sql).schema
    finally:
        spark.conf.set(CONSTRAINTS, before)
        spark.catalog.dropTempView(view)
    columns = [(f.name, f.dataType.simpleString()) for f in schema
               if f.name not in LAKE_BOOKKEEPING] + [("_merged_at", "timestamp"),
                                                     ("_hoodie_is_deleted", "boolean")]
    spec = session_format(spark)
    if not spec.bucket_lakes:  # Iceberg: a MERGE writes it, deletes as deletes
        columns.remove(("_hoodie_is_deleted", "boolean"))
    bucket = new_lake_index(dbt, tables) if spec.bucket_lakes else {}
    properties = ", ".join(f"'{k}' = '{v}'"
                           for k, v in lake_properties(spec.name, bucket).items())
    check_held(tables.job)
    spark.sql(f"create table {lake} ({', '.join(f'`{c}` {t}' for c, t in columns)}) "
              f"using {spec.using} tblproperties ({properties})")
    if spec.bucket_lakes:
        keep_write_settings(spark, location(spark, lake), bucket)
        nulls = ", ".join(f"cast(null as {t}) as `{c}`" for c, t in columns)
        spark.sql(f"insert into {lake} select {nulls} where false")
    log.info("created %s lake %s (%d columns%s)", spec.title, lake, len(columns),
             f", {bucket['hoodie.bucket.index.num.buckets']} buckets" if bucket else "")


def compile_job(spark: SparkSession, dbt: Dbt, tables: JobTables, cache: dict[str, Any]
                ) -> CompiledJob:
    """The job's compiled SQL, from ``cache`` (or the job's saved entry: steps/dbt.py) while
    the project, the job's dbt vars, the raw table's columns and the lake's columns are what
    they were compiled against."""
    models = tables.models
    assert models is not None and models.lake is not None and tables.lake is not None
    raw_columns = [(f.name, f.dataType.simpleString()) for f in spark.table(tables.raw).schema]
    lake_columns = sorted(c.lower() for c in spark.table(tables.lake).columns)

    def key() -> str:
        return hashlib.sha256(repr((dbt.project_key(), sorted(tables.dbt_vars().items()),
                                    raw_columns, lake_columns)).encode()).hexdigest()

    found, now = cache.get(tables.job), key()
    if found is not None and found.key == now:
        return found  # type: ignore[no-any-return,unused-ignore]
    saved = dbt.saved_sql(tables.job, now)
    if saved is None:
        log.info("compiling job %s's converter %s and lake model %s", tables.job,
                 models.staging, models.lake)
        converter, change_set, _ = _compile(spark, dbt, tables, has_target=True)
        now = key()  # of the project as parsed
        dbt.save_sql(tables.job, now, converter=converter, change_set=change_set)
    else:
        converter, change_set = str(saved["converter"]), str(saved["change_set"])
    compiled = CompiledJob(now, converter, change_set, VALID, frozenset(lake_columns))
    cache[tables.job] = compiled
    return compiled


def converted_rows(spark: SparkSession, sql: str, tables: JobTables) -> DataFrame:
    """The converter's rows of some raw batches; Spark's refusal of its SQL (a column that is
    not there, a type that does not cast) as a PipelineError naming the model."""
    from pyspark.errors import AnalysisException, ParseException

    try:
        return spark.sql(sql)
    except (AnalysisException, ParseException) as exc:
        raise PipelineError(f"converter {tables.staging_model} (compiled by dbt) failed: "
                            f"{exc}") from exc
