"""The fork's report: Great Expectations' Data Docs, built from the fork's own figures.

One validation page per fork, rendered by Great Expectations from what the one-pass fork
counted (``DocsJob``: no Spark, off the batch's path when the caller defers it: the runner's
services thread), with the fork's own summary on top: rows judged and rows routed per
expectation, and the query listing them in the error table.

The pages load their scripts, styles and fonts from the report folder itself: the copies
vendored at set-up (``python_ingest.reports.assets``) are copied into
``<report dir>/static/vendor`` and the pages point there (``localize_pages``).
"""

from __future__ import annotations

import html
import json
import logging
import os
import re
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from python_ingest.runtime.jars import repo_root
from python_ingest.steps.fork.expectations import failure_name, judged_suite, sql_string

log = logging.getLogger(__name__)

STEP = "fork"
ERROR_PREFIX = "failed expectations: "
ASSETS_DIR_ENV = "SLUICE_REPORT_ASSETS_DIR"
ASSETS_MANIFEST = "manifest.json"
_GX_IMAGE = re.compile(r"https://great-expectations-web-assets\.s3[\w.-]*/([\w.-]+)[^\"'\s<>]*")
_CROSS_ORIGIN = re.compile(r'\s(?:integrity|crossorigin)="[^"]*"')
# Great Expectations keeps process-wide state (its context and data docs machinery): jobs
# forking in parallel threads of one runner validate one at a time
GX_LOCK = threading.Lock()
def error_query(error_table: str, batch_from: int, batch_to: int, failure: str) -> str:
    """SQL listing the error rows of batches ``batch_from..batch_to`` that failed ``failure``
    (``column: expectation`` as in ``error_exception``)."""
    items = f"split(regexp_replace(error_exception, '^{ERROR_PREFIX}', ''), '; ')"
    return (f"select * from {error_table}\nwhere error_step = '{STEP}' and _batch_id between "
            f"{batch_from} and {batch_to}\n  and array_contains({items}, {sql_string(failure)})")


def report_assets_home() -> Path:
    """The vendored report assets: ``$SLUICE_REPORT_ASSETS_DIR`` or ``.sluice/report-assets``
    of the repository (they belong to the installation, like the jars)."""
    override = os.environ.get(ASSETS_DIR_ENV)
    return Path(override).expanduser() if override else repo_root() / ".sluice" / "report-assets"


@dataclass
class DocsJob:
    """The Data Docs page of one fork, built from its figures off the batch's path
    (``build``): Great Expectations renders it, the fork's own summary goes on top."""

    suite: dict[str, Any]
    quality: list[dict[str, Any]]
    fallback_results: dict[int, Any]  # GE's own results of the fallback ones, by position
    report_dir: Path
    run_name: str
    staging: str
    valid_table: str
    error_table: str
    result: Any = None

    def build_quietly(self) -> None:
        """``build``, a failure logged, never raised: a report must not fail a committed
        batch."""
        try:
            self.build()
        except Exception:
            log.exception("the expectation report of %s could not be built", self.staging)

    def build(self) -> str | None:
        """Write the page and the site's index; returns the page's path."""
        assert self.result is not None
        with GX_LOCK:
            page = _render(self)
        if page:
            _summarize(Path(page), self.result, self.staging, self.valid_table,
                       self.error_table)
        localize_pages(self.report_dir)
        return page


def _site_url(context: Any, resource: Any = None) -> str | None:
    sites = context.get_docs_sites_urls(resource_identifier=resource, site_names=["sluice"])
    return str(sites[0].get("site_url") or "") or None if sites else None


def _render(job: DocsJob) -> str | None:
    """Great Expectations' validation page of a fork from the fork's figures (no Spark)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    import great_expectations as gx

    # (this module sets its own logger to INFO when imported: "Created temporary directory")
    logging.getLogger("great_expectations.data_context.types.base").setLevel(logging.WARNING)
    from great_expectations.core import (
        ExpectationSuiteValidationResult,
        ExpectationValidationResult,
    )
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.base import ProgressBarsConfig
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
    )
    from great_expectations.expectations.expectation_configuration import (
        ExpectationConfiguration,
    )

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    job.report_dir.mkdir(parents=True, exist_ok=True)
    context.add_data_docs_site(site_name="sluice", site_config={
        "class_name": "SiteBuilder",
        "store_backend": {"class_name": "TupleFilesystemStoreBackend",
                          "base_directory": str(job.report_dir)},
        "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
    })
    name = str(job.suite.get("name") or "suite")
    expectations = judged_suite(job.suite.get("expectations") or [])
    results = []
    for figures in job.quality:
        index = figures["index"]
        if figures.get("ge"):  # Great Expectations' own result (the fallback)
            continue
        expectation = expectations[index]
        kind = str(expectation.get("type") or expectation.get("expectation_type"))
        config = ExpectationConfiguration(type=kind, kwargs=dict(expectation.get("kwargs") or {}),
                                          meta=expectation.get("meta"))
        checked, unexpected = figures["checked"], figures["unexpected"]
        share = 100.0 * unexpected / checked if checked else 0.0
        if figures.get("table"):
            result = ExpectationValidationResult(success=not unexpected,
                                                 expectation_config=config,
                                                 result={"observed_value": checked})
        else:
            result = ExpectationValidationResult(
                success=not unexpected, expectation_config=config,
                result={"element_count": checked, "unexpected_count": unexpected,
                        "unexpected_percent": share, "unexpected_percent_total": share,
                        "unexpected_percent_nonmissing": share, "missing_count": 0,
                        "missing_percent": 0.0, "partial_unexpected_list": []})
        results.append((index, result))
    by_index = dict(results)
    ordered = []
    for figures in job.quality:
        if figures["index"] in by_index:
            ordered.append(by_index[figures["index"]])
        else:
            ordered.append(job.fallback_results[figures["index"]])
    passed = sum(1 for r in ordered if r.success)
    run_id = RunIdentifier(run_name=job.run_name)
    validation = ExpectationSuiteValidationResult(
        success=passed == len(ordered), results=ordered, suite_name=name,
        statistics={"evaluated_expectations": len(ordered), "successful_expectations": passed,
                    "unsuccessful_expectations": len(ordered) - passed,
                    "success_percent": 100.0 * passed / len(ordered) if ordered else 100.0},
        meta={"run_id": run_id, "great_expectations_version": gx.__version__,
              "batch_spec": {"data_asset_name": job.staging},
              "batch_markers": {}, "validation_time": run_id.to_json_dict()["run_time"]})
    key = ValidationResultIdentifier(
        expectation_suite_identifier=ExpectationSuiteIdentifier(name=name), run_id=run_id,
        batch_identifier="new staging rows")
    context.validation_results_store.set(key, validation)
    context.build_data_docs(site_names=["sluice"], resource_identifiers=[key])
    url = _site_url(context, key)
    return unquote(urlparse(url).path) if url else None


def _summarize(page: Path, result: Any, staging: str, valid: str, errors: str) -> None:
    """Put the fork's own figures for this batch at the top of its validation page."""
    e = html.escape
    batches = (f"batch {result.batch_to}" if result.batch_to == result.batch_from + 1
               else f"batches {result.batch_from + 1}..{result.batch_to}")
    rows, queries = [], []
    for n, q in enumerate(result.quality, 1):
        failure = failure_name(q["column"], q["expectation"])
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
