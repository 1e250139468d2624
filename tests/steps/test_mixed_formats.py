"""A job's own ``table_format``: in a Hudi project one job keeps its tables in Iceberg, the
other in Hudi, both in one warehouse, run by the same process one after another (``sluice run
--all``'s path) and by a continuous runner's job sessions; meta.runs stays in the project's
format; `sluice maintain` and a replay work on the job's own format; a plain dbt run refuses
the other format's job by name instead of writing its tables in the wrong catalog."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from python_ingest.config.table_formats import FORMAT_CONF
from python_ingest.demo import trips as demo
from python_ingest.demo.trips import TripsGenerator
from python_ingest.exceptions import PipelineError
from python_ingest.kafka import broker as broker_mod
from python_ingest.runtime.catalog import location
from python_ingest.runtime.session import activate, active, for_job, job_session, project_session
from python_ingest.steps import transform
from python_ingest.steps.dbt import Dbt
from python_ingest.steps.pipeline import run_all
from python_ingest.steps.services import maintain_job
from python_ingest.tables.checkpoints import read_checkpoint, step_checkpoint
from python_ingest.tables.runs import flush_records, last_runs
from tests.conftest import REPO, trips_job
from tests.steps.helpers import as_lake, lake_rows


@pytest.mark.e2e
def test_a_job_with_its_own_table_format_lands_beside_the_projects(
        spark: Any, broker: str, make_settings: Any, project: Any, job_name: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    hudi_job, iceberg_job = f"{job_name}_h", f"{job_name}_i"
    project(hudi_job)
    project(iceberg_job)
    settings = make_settings({hudi_job: trips_job(hudi_job),
                              iceberg_job: trips_job(iceberg_job, table_format="ICEBERG")})
    assert settings.table_format == "hudi"
    assert settings.format_of(settings.job(iceberg_job)) == "iceberg"
    assert settings.format_of(settings.job(hudi_job)) == "hudi"
    dbt = Dbt(settings)
    generators = {}
    for seed, name in enumerate((hudi_job, iceberg_job), start=11):
        broker_mod.ensure_topic(broker, name, 2)
        generators[name] = TripsGenerator(demo.trips_schema(REPO), seed=seed, first_trip_id=1,
                                          malformed_rate=0.0, duplicate_rate=0.0)
    for _ in range(2):  # inserts, then updates and deletes of them
        for name, generator in generators.items():
            demo.produce(broker, name, generator.events(150))
        results = run_all(spark, settings, [hudi_job, iceberg_job])
        assert [r.outcome for r in results] == ["succeeded", "succeeded"]
    assert spark.conf.get(FORMAT_CONF) == "hudi"  # the caller's session is left as it was

    iceberg_spark = for_job(spark, settings, settings.job(iceberg_job))
    assert iceberg_spark.conf.get(FORMAT_CONF) == "iceberg"
    for name, session in ((hudi_job, spark), (iceberg_job, iceberg_spark)):
        tables = next(r.tables for r in results if r.job == name)
        assert tables is not None and tables.lake is not None
        with active(session):
            expected = {k: as_lake(row) for k, row in generators[name].rows.items()}
            assert lake_rows(session, tables.lake) == expected
            assert read_checkpoint(session, tables.raw).batch_id == 2  # type: ignore[union-attr]
            assert step_checkpoint(session, tables.lake, "merge") == 2
            for table in (tables.raw, tables.errors, tables.lake, tables.index):
                folder = Path(location(session, table))
                assert (folder / ".hoodie").is_dir() == (name == hudi_job), table
                assert (folder / "metadata").is_dir() == (name == iceberg_job), table
        assert [r["outcome"] for r in last_runs(spark, name, 5)] == ["succeeded"] * 2
    # meta.runs is the project's (Hudi) table, whichever session asks
    assert project_session(iceberg_spark) is not iceberg_spark
    flush_records()  # the records this process holds (tests/conftest.py)
    runs = project_session(iceberg_spark).sql(
        f"select count(distinct _hoodie_commit_time) from meta.runs where job in "
        f"('{hudi_job}', '{iceberg_job}')").collect()[0][0]
    assert runs >= 1
    assert not Path(location(iceberg_spark, "meta.runs"), "metadata").exists()

    # table services on the job's own format (Iceberg's snapshot expiry, not Hudi's cleaning)
    iceberg = settings.job(iceberg_job)
    with active(iceberg_spark):
        done = maintain_job(iceberg_spark, dbt, iceberg)
    assert any("snapshot" in line for lines in done.values() for line in lines), done

    # a continuous runner's session for the job writes the job's format too
    assert job_session(spark, settings, iceberg).conf.get(FORMAT_CONF) == "iceberg"
    assert job_session(spark, settings, settings.job(hudi_job)).conf.get(FORMAT_CONF) == "hudi"

    # a plain dbt run (the project's Hudi session) names the job it cannot build
    monkeypatch.setattr(transform, "_settings_now", lambda: settings)
    activate(spark)
    with pytest.raises(PipelineError, match=rf"job {iceberg_job} keeps its tables in iceberg"
                                            rf".*sluice run {iceberg_job}"):
        transform.hold(iceberg_job)
