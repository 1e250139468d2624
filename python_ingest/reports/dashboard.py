"""The run dashboard: ``<state_dir>/reports/index.html``.

One row per job (state, backlog, freshness, last run, rows in / valid / errors / merged, error
rate, cost in executor seconds) and, per job, Plotly charts over its recent runs: freshness and
backlog, throughput, error rate, step durations and cost. Plotly's JavaScript is copied from
the installed ``plotly`` package into ``reports/_assets/`` beside the page, so the page needs
no network. Each job links to its expectation reports (Great Expectations Data Docs,
``<job>/index.html``), its newest validation page and its error summary (``<job>/errors.html``,
``reports.errors``).
"""

from __future__ import annotations

import html
import logging
import os
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from python_ingest.config import Settings
from python_ingest.reports.data import STEPS, JobReport, RunPoint, collect
from python_ingest.reports.errors import write_error_summary
from python_ingest.runtime.files import write_private
from python_ingest.steps.pipeline import report_dir
from python_ingest.tables.names import JobTables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

ASSETS = "_assets"
STEP_COLORS = {"ingest": "#4c78a8", "staging": "#72b7b2", "fork": "#f58518", "merge": "#54a24b",
               "services": "#b279a2"}
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #222; }
table { border-collapse: collapse; font-size: 0.9rem; }
th, td { padding: 0.3rem 0.6rem; border-bottom: 1px solid #ddd; text-align: right; }
th { background: #f4f4f4; } td.name, th.name, td.links { text-align: left; }
.succeeded, .up-to-date { color: #2a7a2a; } .failed { color: #b00020; font-weight: bold; }
.muted { color: #777; } section { margin-top: 2rem; } pre { white-space: pre-wrap; }
"""


def dashboard_path(settings: Settings) -> Path:
    return report_dir(settings, "_").parent / "index.html"


def write_dashboard(spark: SparkSession, settings: Settings, names: list[str] | None = None,
                    runs: int = 50, tables: dict[str, JobTables] | None = None) -> Path:
    """Write the dashboard (and each job's error summary) for ``names`` (default: every job)."""
    names = sorted(settings.jobs) if names is None else names
    reports = collect(spark, settings, names, runs, tables)
    path = dashboard_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    plotly_js = _plotly_js(path.parent / ASSETS)
    for report in reports:
        write_error_summary(spark, report, report_dir(settings, report.name) / "errors.html")
    now = datetime.now()
    sections = [_job_section(r, path.parent, settings, now) for r in reports]
    page = (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>sluice: runs</title>"
        f'<script src="{ASSETS}/{plotly_js}"></script><style>{_STYLE}</style></head><body>'
        "<h1>sluice: runs</h1>"
        + _intro(reports, settings, runs, now)
        + _jobs_table(reports, path.parent, settings, now) + "".join(sections)
        + "</body></html>\n")
    write_private(path, page)
    log.info("dashboard of %d jobs: %s", len(reports), path)
    return path


def _intro(reports: list[JobReport], settings: Settings, runs: int, now: datetime) -> str:
    """Where the figures come from and what backlog means, for the jobs shown (neutral about
    the table format: Hudi and Iceberg tables both keep commit metadata; the broker only when
    a Kafka job is shown)."""
    kafka = [r for r in reports if not r.files]
    files = [r for r in reports if r.files]
    sources = ["<code>meta.runs</code> (the "
               f"{runs} newest runs per job)", "the tables' commit metadata"]
    backlog = []
    if kafka:
        sources.append("the broker "
                       f"<code>{html.escape(settings.broker.bootstrap_servers)}</code>")
        backlog.append("messages waiting in Kafka")
    if files:
        sources.append("the landing dirs")
        backlog.append("a files job's ready partitions not taken yet")
    return (f'<p class="muted">Written {now:%Y-%m-%d %H:%M:%S} from {", ".join(sources[:-1])} '
            f"and {sources[-1]}. Freshness: how old the newest landed record was"
            + (f"; backlog: {'; '.join(backlog)}" if backlog else "")
            + ". <code>sluice report</code> rewrites this page.</p>")


def _plotly_js(folder: Path) -> str:
    """Plotly's JavaScript from the installed package, copied once beside the dashboard."""
    import plotly
    from plotly.offline import get_plotlyjs

    name = f"plotly-{plotly.__version__}.min.js"
    if not (folder / name).is_file():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{name}.{os.getpid()}"
        tmp.write_text(get_plotlyjs())
        tmp.replace(folder / name)
    return name


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size * 1.5:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def _links(report: JobReport, root: Path, settings: Settings) -> str:
    folder = report_dir(settings, report.name)
    links = []
    if (folder / "index.html").is_file():
        links.append(f'<a class="report" href="{_rel(folder / "index.html", root)}">'
                     "expectation reports</a>")
    pages = sorted((folder / "validations").rglob("*.html"), key=lambda p: p.stat().st_mtime) \
        if (folder / "validations").is_dir() else []
    if pages:
        links.append(f'<a class="validation" href="{_rel(pages[-1], root)}">newest batch</a>')
    links.append(f'<a class="errors" href="{_rel(folder / "errors.html", root)}">errors</a>')
    return " · ".join(links)


def _rel(path: Path, root: Path) -> str:
    return html.escape(Path(os.path.relpath(path, root)).as_posix())


def _jobs_table(reports: list[JobReport], root: Path, settings: Settings, now: datetime) -> str:
    head = ("<tr><th class='name'>job</th><th>state</th><th>backlog</th><th>freshness</th>"
            "<th>last run</th><th>rows in</th><th>valid</th><th>errors</th><th>merged</th>"
            "<th>error rate</th><th title='seconds its Spark tasks ran, summed over the "
            "tasks'>cost (executor s)</th><th class='name'>reports</th></tr>")
    rows = []
    for r in reports:
        e = html.escape
        last = r.last
        state = last.outcome if last else "no runs"
        backlog = (f"{r.backlog:,}" if r.backlog is not None
                   else f'<span class="muted" title="{e(r.backlog_error or "")}">?</span>')
        if r.late_partitions:  # skipped, never read: docs/files-source.md
            backlog += (f'<div class="late failed" title="partitions that arrived after the '
                        f'watermark passed their keys: skipped">{r.late_partitions:,} late, '
                        "skipped</div>")
        fresh = _age((now - r.newest_data).total_seconds()) if r.newest_data else "–"
        when = (f"{last.finished_at:%Y-%m-%d %H:%M:%S} ({last.duration_s:.1f} s)" if last
                else "–")
        rate = f"{last.error_rate:.2%}" if last and last.error_rate is not None else "–"
        total_cost = sum(run.core_seconds for run in r.runs)
        cost = (f"{_cost(last)} <span class='muted'>({total_cost:,.0f} over "
                f"{len(r.runs)} runs)</span>" if last else "–")
        counts = ""
        for name in ("read", "valid", "errors", "merged"):  # the last run's, and the sum
            total = sum(getattr(run, name) for run in r.runs)
            counts += (f'<td>{getattr(last, name):,}<div class="muted" title="over the '
                       f'{len(r.runs)} runs plotted">Σ {total:,}</div></td>' if last
                       else "<td>–</td>")
        title = e(last.error or "") if last else ""
        rows.append(
            f'<tr class="job" data-job="{e(r.name)}" data-state="{e(state)}">'
            f'<td class="name"><a href="#job-{e(r.name)}">{e(r.name)}</a></td>'
            f'<td class="{e(state)}" title="{title}">{e(state)}</td><td>{backlog}</td>'
            f"<td>{fresh}</td><td>{when}</td>{counts}<td>{rate}</td><td>{cost}</td>"
            f'<td class="links">{_links(r, root, settings)}</td></tr>')
    return f'<table id="jobs"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'


def _cost(run: RunPoint) -> str:
    """A run's executor seconds, its CPU seconds in the tip; a run recorded before runs were
    metered has only wall time × cores, marked as such."""
    if run.executor_s is None:
        return (f'<span class="muted" title="not metered: wall time × cores">'
                f"~{run.core_seconds:,.1f}</span>")
    cpu = f"{run.cpu_s:,.1f}" if run.cpu_s is not None else "?"
    return f'<span title="CPU {cpu} s">{run.executor_s:,.1f}</span>'


def _job_section(report: JobReport, root: Path, settings: Settings, now: datetime) -> str:
    e = html.escape
    late = (f' · <span class="late failed">{report.late_partitions:,} late partition(s) '
            "skipped (below the watermark, never read: the run's log names them)</span>"
            if report.late_partitions else "")
    head = (f'<section id="job-{e(report.name)}"><h2>{e(report.name)}</h2><p>'
            f"{'landing dir' if report.files else 'topic'} <code>{e(report.topic)}</code>{late}"
            f" · {report.error_rows:,} rows in "
            f"<code>{e(report.tables.errors)}</code>, {report.raw_error_rows:,} in "
            f"<code>{e(report.tables.raw_errors)}</code> · {_links(report, root, settings)}</p>")
    if report.last and report.last.error:
        head += f'<pre class="failed">last run failed: {e(report.last.error)}</pre>'
    if not report.runs:
        return head + '<p class="muted">no runs yet</p></section>'
    return head + _plots(report) + "</section>"


def _titles(report: JobReport) -> tuple[str, ...]:
    """The six panels' titles: a files job reads records from partitions, not messages."""
    if report.files:
        return ("freshness (s, age of newest landed record)",
                "backlog (ready partitions waiting)", "throughput (records read / s of run)",
                "error rate (errors / records read, %)", "step durations (s)",
                "cost (executor seconds per run)")
    return ("freshness (s, age of newest landed message)", "backlog (messages waiting in Kafka)",
            "throughput (messages read / s of run)", "error rate (errors / messages read, %)",
            "step durations (s)", "cost (executor seconds per run)")


def _plots(report: JobReport) -> str:
    """Plotly charts over the job's recent runs (one figure, six panels)."""
    from plotly import graph_objects as go
    from plotly.subplots import make_subplots

    runs = report.runs
    x = [run.finished_at for run in runs]  # lines on a time axis, bars one per run
    labels = [f"{run.finished_at:%m-%d %H:%M:%S}" for run in runs]
    fig = make_subplots(rows=2, cols=3, horizontal_spacing=0.07, vertical_spacing=0.16,
                        subplot_titles=_titles(report))
    hover = [f"run {run.run_id} · batch {run.batch_id} · {run.outcome}" for run in runs]

    def line(y: list[Any], row: int, col: int, name: str, color: str) -> None:
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=name, hovertext=hover,
                                 line={"color": color}, showlegend=False), row=row, col=col)

    line([run.freshness_s for run in runs], 1, 1, "freshness", "#4c78a8")
    line([run.backlog for run in runs], 1, 2, "backlog", "#e45756")
    line([round(run.throughput, 1) for run in runs], 1, 3, "throughput", "#54a24b")
    line([None if run.error_rate is None else round(100 * run.error_rate, 3) for run in runs],
         2, 1, "error rate", "#f58518")
    for step in STEPS:
        fig.add_trace(go.Bar(x=labels, y=[round(run.steps.get(step, 0.0), 2) for run in runs],
                             name=step, marker_color=STEP_COLORS[step], hovertext=hover,
                             legendgroup="steps"), row=2, col=2)
    fig.add_trace(go.Bar(x=labels, y=[round(run.core_seconds, 1) for run in runs], name="cost",
                         marker_color=["#9d755d" if run.executor_s is not None else "#d8c3b4"
                                       for run in runs],
                         hovertext=[h if run.executor_s is not None else
                                    f"{h} · not metered: wall time × cores"
                                    for h, run in zip(hover, runs, strict=True)],
                         showlegend=False), row=2, col=3)
    fig.add_trace(go.Scatter(x=labels, y=[None if run.cpu_s is None else round(run.cpu_s, 1)
                                          for run in runs], mode="markers", name="CPU s",
                             marker={"color": "#4c4c4c", "symbol": "line-ew-open", "size": 14},
                             hovertext=hover, showlegend=False), row=2, col=3)
    for col in (2, 3):
        fig.update_xaxes(type="category", row=2, col=col)
    fig.update_layout(barmode="stack", height=560, margin={"l": 40, "r": 20, "t": 40, "b": 40},
                      legend={"orientation": "h", "y": -0.08}, template="plotly_white")
    div_id = "plots-" + "".join(c if c.isalnum() else "-" for c in report.name)
    return str(fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id,
                           config={"displaylogo": False, "responsive": True}))

