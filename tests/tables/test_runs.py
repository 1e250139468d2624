"""Run records: written at once by a one-shot run; held back and written together, in one
commit, by a long-running runner (``records_deferred``)."""

from __future__ import annotations

from typing import Any

import pytest

from python_ingest.tables.names import RUNS_TABLE
from python_ingest.tables.runs import Run, records_deferred


def _recorded(spark: Any, job: str) -> set[str]:
    return {r[0] for r in spark.sql(f"select run_id from {RUNS_TABLE} where job = '{job}'"
                                    ).collect()}


@pytest.mark.e2e
def test_deferred_run_records_land_together_when_the_block_ends(spark: Any,
                                                                job_name: str) -> None:
    Run(job=job_name).finish(spark, "succeeded")  # at once
    assert len(_recorded(spark, job_name)) == 1
    with records_deferred(spark, every_s=3600):
        runs = [Run(job=job_name) for _ in range(3)]
        for run in runs:
            run.finish(spark, "succeeded")
        assert len(_recorded(spark, job_name)) == 1  # held back
    ids = {run.run_id for run in runs}
    assert _recorded(spark, job_name) >= ids
    if "_hoodie_commit_time" in spark.table(RUNS_TABLE).columns:  # Hudi: in one commit
        wanted = ", ".join(f"'{i}'" for i in ids)
        assert spark.sql(f"select count(distinct _hoodie_commit_time) from {RUNS_TABLE} "
                         f"where run_id in ({wanted})").collect()[0][0] == 1
    Run(job=job_name).finish(spark, "failed", "boom")  # at once again after the block
    assert len(_recorded(spark, job_name)) == 5
