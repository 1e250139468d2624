"""Spark's memory pages (runtime/session.py page_size): 1 MiB on the embedded default's 4g
heap instead of Spark's 64 MiB, larger only where a task's 8,192 pages must cover a larger
heap, and a page size the user sets wins."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from python_ingest.exceptions import ConfigError
from python_ingest.runtime.session import page_size, spark_conf


@pytest.mark.parametrize(("memory", "page"), [
    ({"spark.driver.memory": "4g"}, "1024k"),
    ({"spark.driver.memory": "512m"}, "1024k"),
    ({}, "1024k"),
    ({"spark.driver.memory": "8g"}, "1024k"),
    ({"spark.driver.memory": "4g", "spark.executor.memory": "64g"}, "8192k"),
    ({"spark.driver.memory": "96G", "spark.executor.memory": "2g"}, "16384k"),
    ({"spark.executor.memory": "16384"}, "2048k"),  # no unit: MiB, as Spark reads it
    ({"spark.executor.memory": "24gb"}, "4096k"),
])
def test_the_page_size_is_the_smallest_whose_page_table_covers_the_heap(
        memory: dict[str, str], page: str) -> None:
    assert page_size(memory) == page


def test_a_heap_setting_that_is_no_size_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError,
                       match=r"'spark.conf.spark.executor.memory': 'lots' is not a memory size"):
        page_size({"spark.executor.memory": "lots"})


def test_a_page_size_the_user_sets_wins(base_settings: Any) -> None:
    assert spark_conf(base_settings)["spark.buffer.pageSize"] == "1024k"
    spark = dataclasses.replace(base_settings.spark,
                                conf={**base_settings.spark.conf, "spark.buffer.pageSize": "4m"})
    assert spark_conf(dataclasses.replace(base_settings, spark=spark))[
        "spark.buffer.pageSize"] == "4m"


@pytest.mark.e2e
def test_the_sessions_memory_manager_hands_out_one_mib_pages(spark: Any) -> None:
    manager = spark.sparkContext._jsc.sc().env().memoryManager()
    assert manager.pageSizeBytes() == 1 << 20
    # and a sort and an aggregation (each takes pages) still answer
    rows = spark.range(100_000).selectExpr("id % 7 as k", "id").groupBy("k").count() \
        .orderBy("k").collect()
    assert [(r["k"], r["count"]) for r in rows] == [
        (k, len(range(k, 100_000, 7))) for k in range(7)]
