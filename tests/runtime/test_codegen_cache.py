"""Spark's cache of generated code (runtime/session.py CODEGEN_CACHE_ENTRIES): a session keeps
the classes of more distinct statements than Spark's default 100, so a batch's statements,
run again by the next batch, are not compiled again."""

from __future__ import annotations

from typing import Any

import pytest

from python_ingest.runtime.session import CODEGEN_CACHE_ENTRIES


@pytest.mark.e2e
def test_a_statement_run_again_after_many_others_is_not_compiled_again(spark: Any) -> None:
    metrics = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics

    def compiled() -> int:
        return int(metrics.METRIC_COMPILATION_TIME().getCount())

    def statement(n: int) -> list[Any]:
        # the literal is part of the generated code: each n is a statement of its own
        return spark.range(5).selectExpr(f"id * 7919 + {n} as x").collect()

    first = statement(0)
    before = compiled()
    for n in range(1, 151):  # more distinct statements than Spark's default cache holds
        statement(n)
    assert compiled() > before, "the distinct statements were compiled"
    again = compiled()
    assert statement(0) == first
    assert compiled() == again, "the first statement was compiled a second time"
    assert int(spark.conf.get("spark.sql.codegen.cache.maxEntries")) == CODEGEN_CACHE_ENTRIES
