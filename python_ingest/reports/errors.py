"""A job's error summary (``<state_dir>/reports/<job>/errors.html``): what is in its error
tables, per step, batch and failed expectation, each with the query that lists its rows."""

from __future__ import annotations

import html
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from python_ingest.reports.data import JobReport
from python_ingest.runtime.files import private_dir, write_private
from python_ingest.steps.fork.split import ERROR_PREFIX, STEP, error_query
from python_ingest.tables.formats import table_exists

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

NEWEST = 20
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #222; }
table { border-collapse: collapse; font-size: 0.85rem; margin-bottom: 1rem; }
th, td { padding: 0.25rem 0.5rem; border-bottom: 1px solid #ddd; text-align: left;
         vertical-align: top; }
th { background: #f4f4f4; } td.n { text-align: right; } .muted { color: #777; }
pre { background: #f7f7f7; padding: 0.5rem; white-space: pre-wrap; }
"""


def write_error_summary(spark: SparkSession, report: JobReport, path: Path) -> Path:
    """Write the job's error summary page (its error tables may not exist yet)."""
    e = html.escape
    tables = report.tables
    parts = [f"<h1>errors of job {e(report.name)}</h1>",
             f'<p class="muted">Written {datetime.now():%Y-%m-%d %H:%M:%S}. '
             '<a href="../index.html">all jobs</a></p>']
    if tables.models is not None and table_exists(spark, tables.errors):
        parts += _pipeline_errors(spark, tables.errors)
    else:
        parts.append(f"<p>no table {e(tables.errors) if tables.models else 'errors.<job>'} "
                     "yet</p>")
    if table_exists(spark, tables.raw_errors):
        parts += _raw_errors(spark, tables.raw_errors)
    page = (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>errors: '
            f"{e(report.name)}</title><style>{_STYLE}</style></head><body>"
            + "".join(parts) + "</body></html>\n")
    private_dir(path.parent)
    return write_private(path, page)  # it quotes source rows: owner-only


def _table(rows: list[Any], headers: tuple[str, ...], css: str = "") -> str:
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(
        f'<td class="n">{v:,}</td>' if isinstance(v, int) else f"<td>{e(str(v))}</td>"
        for v in row) + "</tr>" for row in rows)
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _pipeline_errors(spark: SparkSession, table: str) -> list[str]:
    e = html.escape
    steps = spark.sql(f"select error_step, _batch_id, count(*) from {table} group by 1, 2 "
                      "order by 2 desc, 1 limit 50").collect()
    total = sum(int(r[2]) for r in steps)
    parts = [f"<h2><code>{e(table)}</code>: rows the fork or the merge rejected</h2>",
             _table([(r[0], int(r[1]), int(r[2])) for r in steps], ("step", "batch", "rows"))]
    span = spark.sql(f"select min(_batch_id), max(_batch_id) from {table} where error_step = "
                     f"'{STEP}'").collect()[0]
    if span[0] is not None:
        first, last = int(span[0]), int(span[1])
        failures = spark.sql(
            f"select failure, count(*) as n from (select explode(split(regexp_replace("
            f"error_exception, '^{ERROR_PREFIX}', ''), '; ')) as failure from {table} where "
            f"error_step = '{STEP}') group by 1 order by 2 desc").collect()
        parts.append(f"<h3>failed expectations (fork, batches {first}..{last})</h3>"
                     "<p>A row failing several expectations is one error row, counted under "
                     "each.</p>")
        rows = []
        for n, r in enumerate(failures, 1):
            query = error_query(table, first, last, str(r["failure"]))
            rows.append(f'<tr class="failure" data-failure="{e(str(r["failure"]))}" '
                        f'data-rows="{int(r["n"])}"><td><code>{e(str(r["failure"]))}</code>'
                        f'</td><td class="n"><a href="#query-{n}">{int(r["n"]):,}</a></td>'
                        f'<td><pre id="query-{n}">{e(query)}</pre></td></tr>')
        parts.append("<table><thead><tr><th>expectation</th><th>rows</th><th>query</th></tr>"
                     f"</thead><tbody>{''.join(rows)}</tbody></table>")
    newest = spark.sql(
        f"select _row_key, _batch_id, error_step, error_exception, substr(error_source_data, "
        f"1, 300) from {table} order by _errored_at desc, _batch_id desc limit {NEWEST}"
    ).collect()
    parts += [f"<h3>newest rows (of {total:,} in the batches above)</h3>",
              _table([tuple(r) for r in newest],
                     ("row key", "batch", "step", "error", "row (JSON, cut)"))]
    return parts


def _raw_errors(spark: SparkSession, table: str) -> list[str]:
    e = html.escape
    batches = spark.sql(f"select _batch_id, count(*) from {table} group by 1 order by 1 desc "
                        "limit 50").collect()
    newest = spark.sql(f"select _row_key, _batch_id, _kafka_partition, _kafka_offset, "
                       f"error_exception from {table} order by _batch_id desc, _kafka_offset "
                       f"desc limit {NEWEST}").collect()
    return [f"<h2><code>{e(table)}</code>: messages that could not be decoded</h2>",
            _table([(int(r[0]), int(r[1])) for r in batches], ("batch", "messages")),
            _table([tuple(r) for r in newest], ("key", "batch", "partition", "offset", "error"))]
