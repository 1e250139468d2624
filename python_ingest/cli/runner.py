"""``sluice run --continuous`` (the job manager) and ``sluice status`` (without a JVM)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from datetime import UTC, datetime
from typing import Any

from python_ingest.config import JobConfig, Settings
from python_ingest.config.files import FileSourceConfig
from python_ingest.exceptions import ConfigError, SluiceError
from python_ingest.kafka.offsets import backlog
from python_ingest.tables.status import StatusFile, parse_iso


def add_runner_options(run: argparse.ArgumentParser) -> None:
    """``sluice run``'s continuous-mode options."""
    run.add_argument("--continuous", action="store_true",
                     help="keep running: a batch whenever a job's topic has new messages, "
                          "several jobs at once by priority, until SIGTERM/Ctrl-C (a second "
                          "one exits at once)")
    run.add_argument("--duration", type=float, metavar="S",
                     help="continuous, stopping after S seconds")
    run.add_argument("--until-idle", action="store_true",
                     help="continuous, stopping once every job is caught up")
    run.add_argument("--max-parallel", type=int, metavar="N",
                     help="jobs in flight at once (default: runner.max_parallel_jobs, cores)")
    run.add_argument("--poll", type=float, metavar="S",
                     help="seconds between checks for new messages (default: "
                          "runner.poll_interval_s, 1)")


def run_continuously(args: argparse.Namespace, settings: Settings, names: list[str]) -> int:
    """One process, one SparkSession, every named job batch after batch (runner/scheduler)."""
    from python_ingest.runner.scheduler import Runner, fair_scheduler_conf
    from python_ingest.runtime.session import build_session

    runner_conf = settings.runner
    if args.max_parallel is not None:
        if args.max_parallel < 1:
            raise ConfigError("--max-parallel", "must be at least 1")
        runner_conf = dataclasses.replace(runner_conf, max_parallel_jobs=args.max_parallel)
    if args.poll is not None:
        if args.poll <= 0:
            raise ConfigError("--poll", "must be a positive number of seconds")
        runner_conf = dataclasses.replace(runner_conf, poll_interval_s=args.poll)
    jobs = [settings.job(n) for n in names]
    StatusFile(settings.path(settings.state_dir)).check_free()  # before Spark starts
    conf = {**fair_scheduler_conf(settings, jobs), **settings.spark.conf}
    settings = dataclasses.replace(settings, runner=runner_conf,
                                   spark=dataclasses.replace(settings.spark, conf=conf))
    spark = build_session(settings)
    print(f"runner: {len(names)} job(s) ({', '.join(names)}), at most "
          f"{runner_conf.max_parallel_jobs} at once; SIGTERM or Ctrl-C stops after the batches "
          "in flight; 'sluice status' shows where each job stands", flush=True)
    runner = Runner(spark, settings, names, duration_s=args.duration,
                    until_idle=args.until_idle, accept_data_loss=args.accept_data_loss)
    started = time.monotonic()
    slots = runner.run()
    failing = [s.job.name for s in slots.values() if s.failures]
    batches = sum(1 for s in slots.values() for r in s.results if r.outcome == "succeeded")
    print(f"runner stopped after {time.monotonic() - started:.0f}s: {batches} batch(es)"
          + (f"; failing: {', '.join(failing)}" if failing else ""), flush=True)
    return 1 if failing else 0


def _files_backlog(source: FileSourceConfig, checkpoint: dict[str, Any] | None) -> int:
    """A files job's ready partitions that are not in its last checkpoint."""
    from python_ingest.sources.files.partitions import ready_backlog
    from python_ingest.tables.checkpoints import ProcessedPartitions

    return ready_backlog(source, ProcessedPartitions.from_dict((checkpoint or {}).get("files")
                                                                or {}))


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    """Where each job stands, from the status file and the broker's end offsets (no Spark)."""
    if args.history:
        return cmd_status_history(args, settings)
    names = [args.job] if args.job else sorted(settings.jobs)
    jobs = [settings.job(n) for n in names]
    status = StatusFile(settings.path(settings.state_dir))
    data = status.read()
    alive = status.runner_alive(data)
    ends, broker_error = _end_offsets(settings, [j for j in jobs if j.source == "kafka"])
    now = datetime.now(UTC)
    out: dict[str, Any] = {"runner": {**(data.get("runner") or {}), "alive": alive},
                           "jobs": {}}
    if broker_error:
        out["broker_error"] = broker_error
    for job in jobs:
        entry = dict((data.get("jobs") or {}).get(job.name) or {})
        state = entry.get("state", "never run")
        if state in ("running", "maintaining", "retrying", "idle", "elsewhere") and not alive:
            state = "failing" if entry.get("failures") else "stopped"
        checkpoint = entry.get("checkpoint")
        topic_ends = ends.get(job.name) or None  # None: its topic or cluster not found
        behind = None if topic_ends is None else backlog(topic_ends, checkpoint)
        if job.files is not None:  # ready partitions not processed yet
            behind = _files_backlog(job.files, checkpoint)
        newest = parse_iso(entry.get("newest_event_at"))
        out["jobs"][job.name] = {
            "state": state, "topic": job.files.path if job.files else job.topic,
            "priority": job.priority, "backlog": behind,
            "freshness_s": round((now - newest).total_seconds(), 1) if newest else None,
            "newest_event_at": entry.get("newest_event_at"),
            "last_batch": entry.get("last_batch"), "last_run": entry.get("last_run"),
            "failing_since": entry.get("failing_since"), "failures": entry.get("failures"),
            "last_error": entry.get("last_error"), "next_retry_at": entry.get("next_retry_at"),
            "cost": entry.get("cost"), "checkpoint": checkpoint,
            "services": entry.get("services"),
            "late_partitions": entry.get("late_partitions") if job.files else None,
            "held_by": entry.get("held_by") if state == "elsewhere" else None}
    from python_ingest.sources.tap.kinds import print_sources, source_status

    sources = source_status(settings) if not args.job else {}  # e.g. a PostgreSQL slot's lag
    if sources:
        out["sources"] = sources
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return 0
    _print_status(out)
    print_sources(settings, sources)
    return 0


def cmd_status_history(args: argparse.Namespace, settings: Settings) -> int:
    """Print each job's checkpoint and lag per partition, and its last runs (Spark)."""
    from python_ingest.steps.jobs import job_status
    from python_ingest.tables.names import JobTables

    names = [args.job] if args.job else sorted(settings.jobs)
    jobs = [settings.job(n) for n in names]
    from python_ingest.runtime.session import active, build_session, for_job

    spark = build_session(settings)
    for job in jobs:
        with active(for_job(spark, settings, job)) as session:
            status = job_status(session, settings, job, runs=args.runs)
        if args.json:
            print(json.dumps(status, default=str, indent=2))
            continue
        print(f"job {job.name}  topic {job.topic}  raw table {JobTables(job.name).raw}")
        if status.get("broker_error"):
            print(f"  broker: {status['broker_error']}")
        print(f"  {'partition':>9}  {'checkpoint':>12}  {'earliest':>12}  {'end':>12}  "
              f"{'lag':>10}")
        for p in status["partitions"]:
            print(f"  {p['partition']:>9}  {p['checkpoint']!s:>12}  {p['earliest']:>12}  "
                  f"{p['end']:>12}  {p['lag']:>10}")
        print(f"  last batch {status['batch_id']}, total lag {status['lag']}")
        print("  last runs:")
        for run in status["runs"]:
            counts = " ".join(f"{k}={v}" for k, v in sorted((run["counts"] or {}).items()))
            print(f"    {run['started_at']:%Y-%m-%d %H:%M:%S}  {run['outcome']:<10} batch "
                  f"{run['batch_id']!s:<5} {run['duration_s']:.1f}s  {counts}"
                  + (f"  error: {run['error']}" if run["error"] else ""))
    return 0


def _end_offsets(settings: Settings, jobs: list[JobConfig]
                 ) -> tuple[dict[str, dict[int, int]], str | None]:
    """{job: its topic's end offsets} on each job's own cluster (Settings.kafka_for)."""
    from python_ingest.kafka.offsets import ClusterEnds

    if not jobs:  # files jobs only: no broker to ask
        return {}, None
    watcher = ClusterEnds(timeout_s=2.0)  # answer fast
    problems: list[str] = []
    try:
        ends = watcher.end({j.name: (settings.kafka_for(j), j.topic) for j in jobs}, problems)
        return ends, "; ".join(problems) or None
    except SluiceError as exc:
        return {}, str(exc)
    finally:
        watcher.close()


def _print_status(out: dict[str, Any]) -> None:
    runner = out["runner"]
    if runner.get("pid"):
        print(f"runner: {'alive' if runner['alive'] else 'not running'} (pid {runner['pid']} "
              f"on {runner.get('host')}, {runner.get('state')}, heartbeat "
              f"{runner.get('heartbeat_at')})")
    else:
        print("runner: none has run here ('sluice run --all --continuous' starts one)")
    if out.get("broker_error"):
        print(f"broker: {out['broker_error']}")
    print(f"{'job':<24} {'state':<10} {'backlog':>8} {'fresh(s)':>9} {'batch':>6} "
          f"{'in':>7} {'valid':>7} {'errors':>7} {'merged':>7} {'exec-s':>8}")
    for name, job in out["jobs"].items():
        batch = job["last_batch"] or {}
        counts = batch.get("counts") or {}
        errors = sum(int(counts.get(k, 0)) for k in ("decode_errors", "expectation_errors",
                                                     "merge_errors"))
        merged = sum(int(counts.get(k, 0)) for k in ("inserted", "updated", "deleted"))
        cost = (job["cost"] or {}).get("core_seconds")
        print(f"{name:<24} {job['state']:<10} {_dash(job['backlog']):>8} "
              f"{_dash(job['freshness_s']):>9} {_dash(batch.get('batch_id')):>6} "
              f"{_dash(counts.get('read')):>7} {_dash(counts.get('valid')):>7} "
              f"{errors if counts else '-':>7} {merged if counts else '-':>7} "
              f"{_dash(cost):>8}")
        if job["late_partitions"]:
            print(f"  {job['late_partitions']} late partition(s) skipped: below the watermark, "
                  "never read (the run's log names them; docs/files-source.md)")
        if job["held_by"]:
            print(f"  run by the runner pid {job['held_by'].get('pid')} on "
                  f"{job['held_by'].get('host')} (its own state dir has its figures)")
        services = job["services"] or {}
        if services.get("error"):
            print(f"  table services failed at {services.get('at')} (they run again when next "
                  f"due): {_first_line(services['error'])}")
        if job["failures"]:
            print(f"  failing since {job['failing_since']} ({job['failures']} failure(s)); "
                  f"next retry {job['next_retry_at'] or '-'}: {_first_line(job['last_error'])}")


def _first_line(text: str | None, width: int = 160) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= width else line[:width - 3] + "..."


def _dash(value: Any) -> str:
    return "-" if value is None else str(value)


def add_status_command(add: Any) -> None:
    status = add("status", cmd_status, "Show where each job stands: state, backlog, freshness, "
                 "last batch counts and cost (no Spark; --history for checkpoints per "
                 "partition and the last runs from meta.runs).")
    status.add_argument("job", nargs="?", help="job name (default: all jobs)")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument("--history", action="store_true",
                        help="checkpoints per partition and the last runs (starts Spark)")
    status.add_argument("--runs", type=int, default=5,
                        help="with --history: how many runs to list (default 5)")
