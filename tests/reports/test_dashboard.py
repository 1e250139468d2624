"""The run dashboard and a batch's expectation report, opened in a real headless Chromium with
no network: every job row, drawn plots, no failed request, and the report's counts equal to
the error table's."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from python_ingest.cli.main import main
from python_ingest.config import Settings
from python_ingest.demo.trips import TripsGenerator, produce, trips_schema
from python_ingest.kafka import broker as broker_mod
from python_ingest.reports.dashboard import _intro, _job_section, _jobs_table
from python_ingest.reports.data import JobReport, RunPoint, _files_per_run
from python_ingest.steps.fork.split import error_query
from python_ingest.steps.pipeline import report_dir, run_job
from python_ingest.tables.checkpoints import ProcessedPartitions
from python_ingest.tables.names import JobTables
from tests.conftest import REPO, trips_job
from tests.reports.conftest import external_assets


@pytest.mark.e2e
@pytest.mark.browser
def test_dashboard_and_report_offline_in_chromium(spark: Any, broker: str, make_settings: Any,
                                                  project: Any, job_name: str,
                                                  open_offline: Any, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str],
                                                  reports_on: None) -> None:
    project(job_name)
    idle = f"{job_name}_idle"  # a configured job that never ran: a row all the same
    settings = make_settings({job_name: trips_job(job_name), idle: trips_job(idle)})
    broker_mod.ensure_topic(broker, job_name, 2)
    generator = TripsGenerator(trips_schema(REPO), seed=3, invalid_rate=0.1)
    produce(broker, job_name, generator.events(300))
    first = run_job(spark, settings, settings.job(job_name))
    up_to_date = run_job(spark, settings, settings.job(job_name))
    assert first.outcome == "succeeded" and up_to_date.outcome == "up-to-date"
    assert first.counts["expectation_errors"] > 0
    produce(broker, job_name, generator.events(40))  # waiting for the next run: the backlog

    # the real command, in this process (its Spark session is the running one)
    assert main(["--config", str(tmp_path / "sluice.yml"), "report", job_name, idle]) == 0
    path = Path(settings.path(settings.state_dir)) / "reports" / "index.html"
    assert f"dashboard: {path}" in capsys.readouterr().out
    assert external_assets(path.parent / job_name) == {}
    assert not re.search(r"<(script|link|img)[^>]*(src|href)=\"https?://", path.read_text())

    board = open_offline(path)
    page = board.page
    row = page.locator(f'tr.job[data-job="{job_name}"]')
    assert row.get_attribute("data-state") == "up-to-date"
    cells = row.locator("td").all_inner_texts()
    assert cells[2] == "40"  # backlog: the 40 messages produced after the last run
    read_now, read_all = cells[5].split("\n")
    assert read_now == "0" and read_all == "Σ 300"  # the last run read nothing; both: 300
    assert page.locator(f'tr.job[data-job="{idle}"]').get_attribute("data-state") == "no runs"
    plots = page.locator(".js-plotly-plot")
    assert plots.count() == 1  # the idle job has none
    assert page.locator(".js-plotly-plot .main-svg").count() >= 1  # drawn by plotly.js
    assert page.locator(".js-plotly-plot g.trace").count() >= 6  # lines and step bars
    assert board.failed == [] and board.errors == []

    # the newest batch's page (Great Expectations Data Docs) with the fork's own figures
    page.locator(f'tr.job[data-job="{job_name}"] a.validation').click()
    page.wait_for_load_state("load")
    assert "/validations/" in page.url
    summary = page.locator("#sluice-fork")
    assert int(summary.get_attribute("data-errors") or -1) == first.counts["expectation_errors"]
    shown = {r.get_attribute("data-failure"): int(r.get_attribute("data-routed") or -1)
             for r in page.locator("tr.sluice-expectation").all()}
    assert sum(shown.values()) >= first.counts["expectation_errors"] > 0
    errors = first.tables.errors if first.tables else ""
    for failure, routed in shown.items():
        assert routed == spark.sql(error_query(errors, 1, 1, str(failure))).count(), failure
    # Bootstrap, jQuery and Vega came from the report folder: the page is styled and scripted
    assert page.evaluate("typeof window.jQuery === 'function' && typeof window.vegaEmbed "
                         "=== 'function' && typeof jQuery.fn.bootstrapTable === 'function'")
    assert page.evaluate("getComputedStyle(document.querySelector('.navbar')).display") == "flex"
    assert board.failed == [], board.failed

    index = open_offline(report_dir(settings, job_name) / "index.html")
    assert index.page.locator("table").count() >= 1
    assert index.failed == []
    summary_page = open_offline(report_dir(settings, job_name) / "errors.html")
    listed = {r.get_attribute("data-failure"): int(r.get_attribute("data-rows") or -1)
              for r in summary_page.page.locator("tr.failure").all()}
    assert listed == {f: n for f, n in shown.items() if n}


def test_a_files_jobs_figures_speak_of_partitions_and_late_ones(tmp_path: Path) -> None:
    """#34: no Iceberg words on a Hudi lake, no Kafka words for a files job; #35.3: its late
    partitions skipped so far, in its row and its section."""
    settings = Settings(root=tmp_path)
    now = datetime.now()
    run = RunPoint("r1", now - timedelta(seconds=5), now, 5.0, 10.0, "up-to-date", None, None,
                   {"read": 0, "late_partitions": 1},
                   {"partitions_left": ["dt=1/hour=09"], "partitions_late": ["dt=1/hour=05"]})
    files = JobReport("trips_files", "/srv/landing/trips", JobTables("trips_files"), [run],
                      backlog=1, source="files")
    _files_per_run(files, ProcessedPartitions(watermark="dt=1/hour=08"))
    assert (run.backlog, files.late_partitions) == (1, 1)  # the partition that run left
    _files_per_run(files, ProcessedPartitions(late=("dt=1/hour=03", "dt=1/hour=05")))
    assert files.late_partitions == 2  # the checkpoint knows more than the run counted

    intro = _intro([files], settings, 50, now)
    assert "Iceberg" not in intro and "Kafka" not in intro
    assert "commit metadata" in intro and "ready partitions" in intro
    section = _job_section(files, tmp_path, settings, now)
    assert "backlog (ready partitions waiting)" in section and "Kafka" not in section
    assert "landing dir <code>/srv/landing/trips</code>" in section
    assert "2 late partition(s) skipped" in section
    row = _jobs_table([files], tmp_path, settings, now)
    assert re.search(r"<td>1<div class=\"late failed\"[^>]*>2 late, skipped</div></td>", row)

    kafka = JobReport("trips", "trips", JobTables("trips"), [run])
    intro = _intro([kafka, files], settings, 50, now)
    assert "messages waiting in Kafka" in intro and settings.broker.bootstrap_servers in intro
    assert "Iceberg" not in intro
    assert "backlog (messages waiting in Kafka)" in _job_section(kafka, tmp_path, settings, now)
    assert "late" not in _jobs_table([kafka], tmp_path, settings, now)


def test_cost_is_shown_in_executor_seconds_and_an_unmetered_run_is_marked(tmp_path: Path) -> None:
    """#34.6: the cost column and chart speak of executor seconds (the tasks' time, CPU time
    in the tip); a run recorded before runs were metered shows its wall time × cores, marked."""
    settings = Settings(root=tmp_path)
    now = datetime.now()
    old = RunPoint("r1", now - timedelta(seconds=70), now - timedelta(seconds=60), 10.0, 20.0,
                   "succeeded", None, 1, {"read": 5}, {})
    new = RunPoint("r2", now - timedelta(seconds=10), now, 10.0, 3.5, "succeeded", None, 2,
                   {"read": 5}, {"cost": {"executor_s": 3.5, "cpu_s": 1.25}},
                   executor_s=3.5, cpu_s=1.25)
    report = JobReport("trips", "trips", JobTables("trips"), [old, new])
    row = _jobs_table([report], tmp_path, settings, now)
    assert "cost (executor s)</th>" in row and "core" not in row
    assert '<span title="CPU 1.2 s">3.5</span>' in row  # the last run's
    assert "(24 over 2 runs)" in row
    report.runs = [new, old]  # the last run not metered
    row = _jobs_table([report], tmp_path, settings, now)
    assert 'title="not metered: wall time × cores">~20.0</span>' in row
    section = _job_section(report, tmp_path, settings, now)
    assert "cost (executor seconds per run)" in section and "core-seconds" not in section
    assert "not metered: wall time \\u00d7 cores" in section  # the old run's bar (JSON)
