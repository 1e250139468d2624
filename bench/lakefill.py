"""Shared by the benchmarks that need a big lake table fast: fill it with Spark's range
(copies of one merged row, new keys), time the pipeline's merge step, and run each measured
configuration in a process of its own (own JVM) that reports its figures to the parent."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FIGURES = "FIGURES "  # the line a child process reports its figures on
KEEP = "SLUICE_BENCH_KEEP"  # keep run_children's work folder (its path is printed)
REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def report(figures: dict[str, Any]) -> None:
    """In a child process: hand ``figures`` to the parent (``run_child``)."""
    print(FIGURES + json.dumps(figures), flush=True)


def run_child(command: list[str], what: str, cwd: Any) -> dict[str, Any]:
    """Run a child process, echoing its output as it comes; the figures it reported. Exits
    with its error output when it fails or reports none."""
    with tempfile.TemporaryFile("w+") as errors:  # a file: Spark logs fill a pipe
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True,
                                cwd=cwd)
        assert proc.stdout is not None
        found = []
        for line in proc.stdout:
            if line.startswith(FIGURES):
                found.append(json.loads(line[len(FIGURES):]))
            else:
                print(line, end="", flush=True)
        if proc.wait() != 0 or not found:
            errors.seek(0)
            sys.exit(f"the {what} run failed:\n{errors.read()[-4000:]}")
    return dict(found[0])

def add_child_arguments(parser: argparse.ArgumentParser, **one: Any) -> None:
    """The arguments ``run_children`` gives a child, hidden from --help: ``--one`` (its case;
    ``one``: more options of it, e.g. its choices), ``--bootstrap`` and ``--workdir``."""
    parser.add_argument("--one", help=argparse.SUPPRESS, **one)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)


def run_children(script: str, prefix: str,
                 cases: list[tuple[str, str, list[str]]]) -> dict[str, dict[str, Any]]:
    """The parent's part of a benchmark that measures each case in a process of its own: a
    work folder (printed; kept when SLUICE_BENCH_KEEP is set) with an embedded broker the
    children share, then per case (its ``--one`` value, a label, more arguments) ``script
    --one <case> --bootstrap <broker> --workdir <folder> <more>`` (``run_child``), the case's
    own ``<folder>/<case>`` removed after it; the figures by case."""
    from python_ingest.kafka.broker import start_embedded

    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    print(f"working in {workdir}", flush=True)
    keep = bool(os.environ.get(KEEP))
    port = free_port()
    broker = start_embedded(workdir / "broker", "127.0.0.1", port, heap="1g")
    results: dict[str, dict[str, Any]] = {}
    try:
        for case, label, more in cases:
            print(f"{label}:", flush=True)
            results[case] = run_child(
                [sys.executable, script, "--one", case, "--bootstrap", f"127.0.0.1:{port}",
                 "--workdir", str(workdir), *more], label, REPO)
            if not keep:
                shutil.rmtree(workdir / case, ignore_errors=True)
    finally:
        broker.stop()
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return results


SCAN = "select count(*), sum(hash(*)) from {table}"  # every column of every row, merged


def full_scan(spark: Any, table: str, tries: int = 3) -> float:
    """Best of ``tries`` full scans of ``table`` (``SCAN``), in seconds."""
    best = float("inf")
    for _ in range(tries):
        start = time.perf_counter()
        spark.sql(SCAN.format(table=table)).collect()
        best = min(best, time.perf_counter() - start)
    return best


CHUNK = 2_000_000  # rows per insert: Hudi collects each written row's location for the
# record-level index on the driver (10M rows in one insert exhaust a 3 GiB driver)


def fill_lake(spark: Any, lake: str, first_id: int, count: int) -> float:
    """Append ``count`` rows with trip ids from ``first_id`` to the lake table ``lake`` (bulk
    inserts on Hudi, of CHUNK rows each), each a copy of one of its rows with a new key;
    seconds taken."""
    table = spark.table(lake)
    sample = table.where("_row_key is not null").limit(1).collect()[0]
    columns = [f.name for f in table.schema.fields  # a bucket lake's delete flag too
               if not f.name.startswith("_hoodie_") or f.name == "_hoodie_is_deleted"]
    hudi = spark.conf.get("spark.sluice.table_format", "hudi") == "hudi"
    bucket = hudi and "_hoodie_is_deleted" in columns  # a bucket-index lake
    values = copy_select(columns, sample, "id", {"_hoodie_is_deleted": "false"} if bucket else None)
    # the lake's schema: a column the sample holds null in leaves nothing to infer a type from
    spark.createDataFrame([sample], table.schema).select(
        *[c for c in columns if c != "_hoodie_is_deleted"]).createOrReplaceTempView("sample")
    if hudi:
        # a bulk insert writes new file groups; a bucket lake has one per bucket already (its
        # first batch's), so its rows go in by a plain insert, each to its bucket's file group
        spark.conf.set("hoodie.spark.sql.insert.into.operation",
                       "insert" if bucket else "bulk_insert")
    start = time.perf_counter()
    for low in range(first_id, first_id + count, CHUNK):
        high = min(low + CHUNK, first_id + count)
        if hudi and not bucket and high == first_id + count:
            # the last insert's commit compacts the metadata table: the record-level index
            # entries of a bulk load stay in its log files otherwise, every key look-up reads
            # them, and the metadata compaction falls due inside a later, measured merge
            # (93 s at 10M rows)
            spark.conf.set("hoodie.metadata.compact.max.delta.commits", "1")
        spark.sql(f"insert into {lake} ({', '.join(f'`{c}`' for c in columns)}) "
                  f"select {', '.join(values)} from range({low}, {high}) cross join sample s")
    if hudi:
        spark.conf.unset("hoodie.spark.sql.insert.into.operation")
        spark.conf.unset("hoodie.metadata.compact.max.delta.commits")
    return time.perf_counter() - start


def copy_select(columns: list[str], sample: Any, key: str,
                overrides: dict[str, str] | None = None) -> list[str]:
    """The select list of a copy of ``sample`` (a row of the view ``s``) with the trip id
    ``key`` (an expression) and the columns of ``overrides`` (name: expression)."""
    select = []
    for name in columns:
        if name == "trip_id":
            select.append(f"{key} as trip_id")
        elif name == "_row_key":
            select.append(f"replace('{sample['_row_key']}', '{sample['trip_id']}', "
                          f"cast({key} as string)) as _row_key")
        elif name in (overrides or {}):
            select.append(f"{(overrides or {})[name]} as `{name}`")
        else:
            select.append(f"s.`{name}`")
    return select


def copy_lake(spark: Any, lake: str, target: str, properties: dict[str, str] | None = None
              ) -> float:
    """``target``: a keyed merge-on-read Hudi table holding the lake's rows, written by one
    bulk insert (base files only) with the extra table ``properties``; seconds taken."""
    start = time.perf_counter()
    spark.conf.set("hoodie.spark.sql.insert.into.operation", "bulk_insert")
    spark.sql(f"drop table if exists {target} purge")
    columns = ", ".join(f"`{f.name}`" for f in spark.table(lake).schema.fields
                        if not f.name.startswith("_hoodie_"))
    props = {"type": "mor", "primaryKey": "_row_key", "preCombineField": "_ref_key",
             **(properties or {})}
    spark.sql(f"create table {target} using hudi tblproperties "
              f"({', '.join(f'{k!r} = {v!r}' for k, v in props.items())}) "
              f"as select {columns} from {lake}")
    spark.conf.unset("hoodie.spark.sql.insert.into.operation")
    return time.perf_counter() - start


def time_merges(pipeline: Any) -> list[float]:
    """Make ``pipeline._merge`` record how long each call takes; the list it appends to."""
    seconds: list[float] = []
    merge = pipeline._merge

    def timed_merge(*args: Any) -> None:
        start = time.perf_counter()
        merge(*args)
        seconds.append(time.perf_counter() - start)

    pipeline._merge = timed_merge
    return seconds


def time_steps(pipeline: Any) -> dict[str, float]:
    """Make the pipeline's steps add their seconds to the dict returned (cleared by the
    caller before a run): where a batch's time goes, per step."""
    from python_ingest.tables.runs import Run

    seconds: dict[str, float] = {}

    def timed(owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                seconds[label] = seconds.get(label, 0.0) + time.perf_counter() - start

        setattr(owner, name, call)

    for name, label in (("ingest", "ingest"), ("_staging", "staging"), ("fork_staged", "fork"),
                        ("_merge", "merge"), ("_merge_batch", "merge_dbt"),
                        ("merged_counts", "merge_counts"), ("pending_merges", "merge_plan"),
                        ("_services", "services"), ("record_status", "status")):
        timed(pipeline, name, label)
    timed(Run, "finish", "run_record")
    return seconds


def trips_job(workdir: Any, name: str, bootstrap: str, topic: str, table_format: str = "hudi",
              spark_conf: dict[str, str] | None = None, job: dict[str, Any] | None = None
              ) -> tuple[Any, Any, Any, Any, Any]:
    """A demo trips job in its own warehouse under ``workdir`` (config ``sluice-<name>.yml``)
    on an existing broker, with the job settings ``job`` added: (settings, spark, job, dbt,
    generator)."""
    import yaml

    from python_ingest.config import load_settings
    from python_ingest.demo.trips import TripsGenerator, trips_schema
    from python_ingest.kafka.broker import ensure_topic
    from python_ingest.runtime.session import build_session
    from python_ingest.steps.dbt import Dbt

    config = Path(workdir) / f"sluice-{name}.yml"
    config.write_text(yaml.safe_dump({
        "spark": {"master": "local[2]", "conf": spark_conf or {}}, "table_format": table_format,
        "catalog": {"name": "sluice", "type": "hadoop", "warehouse": str(Path(workdir) / name)},
        "broker": {"bootstrap_servers": bootstrap, "embedded": False},
        "state_dir": str(Path(workdir) / f"state-{name}"),
        "jobs": {"trips": {"topic": topic, "schema": str(REPO / "schemas" / "trips.avsc"),
                           "row_key": ["trip_id"], "ref_key": "_ref_key", **(job or {})}}}))
    os.environ["SLUICE_DBT_PROJECT_DIR"] = str(REPO)
    settings = load_settings(config, env={})
    spark = build_session(settings)
    ensure_topic(bootstrap, topic, 4)
    generator = TripsGenerator(trips_schema(REPO), malformed_rate=0.0, duplicate_rate=0.0)
    return settings, spark, settings.job("trips"), Dbt(settings), generator
