"""Benchmarks of the continuous runner (issue #10), each ending with its figure line.

  e2e        500k changelog events through the whole pipeline (one job, a warm continuous
             runner) against ingest alone on the same events in the same run, plus the warm
             time of a 100-event batch (produced → visible in the lake table):
             e2e: events=500000 pipeline=<ev/s> ingest_only=<ev/s> ratio=<p/i> batch100=<s>
  freshness  10 jobs, a producer at a steady 2,000 events/s in total for 3 minutes into one
             continuous runner; per sampled event the time from produce to visible in the lake
             (the end of the run whose merge committed it); the lake then equals the oracle:
             freshness: jobs=10 rate=2000 p50=<s> p95=<s> max=<s> lost=<n> doubled=<n>
  many       50 jobs at a low rate each in one runner:
             many: jobs=50 cycle_p95=<s> freshness_p95=<s> lost=<n>
  fleet      400 jobs of one source (a topic per table, as the tap writes), 40 of them receiving
             events at a steady rate, the others idle, one runner, 5 minutes after warm-up;
             idle_cycle_s is the p95 of the runner's poll over every job's topic (what a cycle
             costs the idle jobs: no Spark job, no table read):
             fleet: jobs=400 active=40 cycle_p95=<s> idle_cycle_s=<s> freshness_p95=<s>
             lost=<n> doubled=<n>

Everything runs here: a private Apache Kafka broker, local Spark, a temporary warehouse.

    .venv/bin/python bench/runner_bench.py e2e [--events 500000]
    .venv/bin/python bench/runner_bench.py freshness [--jobs 10 --rate 2000 --seconds 180]
    .venv/bin/python bench/runner_bench.py many [--jobs 50 --rate 5 --seconds 600]
    .venv/bin/python bench/runner_bench.py fleet [--jobs 400 --active 40 --rate 200
                                                  --seconds 300]
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from python_ingest.demo import trips as demo  # noqa: E402
from python_ingest.demo.fleet import topic_of, write_fleet  # noqa: E402
from python_ingest.kafka.broker import EmbeddedBroker, ensure_topic, start_embedded  # noqa: E402

PARTITIONS = 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Bench:
    """A private broker, a fleet project and the settings of one benchmark."""

    def __init__(self, names: list[str], runner: dict[str, Any] | None = None,
                 extra_jobs: dict[str, dict[str, Any]] | None = None,
                 partitions: int = PARTITIONS) -> None:
        import yaml

        self.work = Path(tempfile.mkdtemp(prefix="sluice-runner-bench-"))
        self.broker: EmbeddedBroker = start_embedded(self.work / "broker", "127.0.0.1",
                                                     free_port(), heap="1g")
        self.bootstrap = self.broker.bootstrap
        self.names = names
        jobs = write_fleet(self.work, names)
        for name in names:
            ensure_topic(self.bootstrap, topic_of(name), partitions)
        jobs.update(extra_jobs or {})
        (self.work / "sluice.yml").write_text(yaml.safe_dump({
            "catalog": {"warehouse": str(self.work / "warehouse")},
            "broker": {"bootstrap_servers": self.bootstrap, "embedded": False},
            "state_dir": str(self.work / "state"), "jobs": jobs,
            "runner": {"poll_interval_s": 0.2, **(runner or {})}}))
        import os

        os.environ["SLUICE_DBT_PROJECT_DIR"] = str(self.work)
        from python_ingest.config import load_settings

        self.settings = load_settings(self.work / "sluice.yml", env={})
        self.generators = {n: demo.TripsGenerator(demo.trips_schema(REPO), seed=i + 1,
                                                  duplicate_rate=0.0, malformed_rate=0.0)
                           for i, n in enumerate(names)}
        self.spark: Any = None

    def session(self, jobs: list[str]) -> Any:
        import dataclasses

        from python_ingest.runner.scheduler import fair_scheduler_conf
        from python_ingest.runtime.session import build_session

        conf = {**self.settings.spark.conf,
                **fair_scheduler_conf(self.settings, [self.settings.job(n) for n in jobs])}
        self.settings = dataclasses.replace(
            self.settings, spark=dataclasses.replace(self.settings.spark, conf=conf))
        self.spark = build_session(self.settings)
        return self.spark

    def runner(self, names: list[str], **kwargs: Any) -> Any:
        from python_ingest.runner.scheduler import Runner

        return Runner(self.spark, self.settings, names, **kwargs)

    def close(self) -> None:
        if self.spark is not None:
            self.spark.stop()
        self.broker.stop()
        shutil.rmtree(self.work, ignore_errors=True)

    def lost_and_doubled(self, names: list[str] | None = None) -> tuple[int, int]:
        """Rows whose lake state differs from the producer's oracle; offsets landed twice."""
        sys.path.insert(0, str(REPO))
        from tests.steps.helpers import as_lake, lake_rows

        lost = doubled = 0
        for name in names or self.names:
            expected = {t: as_lake(r) for t, r in self.generators[name].rows.items()}
            actual = lake_rows(self.spark, f"lake.{name}")
            lost += sum(1 for k in expected.keys() | actual.keys()
                        if expected.get(k) != actual.get(k))
            total, distinct = self.spark.sql(
                f"select count(*), count(distinct _kafka_partition, _kafka_offset) "
                f"from raw.{name}").collect()[0]
            doubled += int(total) - int(distinct)
        return lost, doubled


def visible_times(spark: Any, names: list[str]) -> dict[str, list[tuple[dict[int, int],
                                                                        dict[int, int], float]]]:
    """Per job, each succeeded run's [from, to) offsets and when it finished (epoch s)."""
    out: dict[str, list[tuple[dict[int, int], dict[int, int], float]]] = {n: [] for n in names}
    rows = spark.sql("select job, finished_at, details from meta.runs "
                     "where outcome = 'succeeded'").collect()
    for row in rows:
        if row["job"] not in out:
            continue
        details = json.loads(row["details"])
        start = {int(p): int(o) for p, o in (details.get("checkpoint_from") or {}).items()}
        end = {int(p): int(o) for p, o in (details.get("checkpoint_to") or {}).items()}
        finished = row["finished_at"].replace(tzinfo=UTC).timestamp()
        out[row["job"]].append((start, end, finished))
    return out


class SteadyProducer(threading.Thread):
    """Produces ``rate`` events/s in total over ``jobs`` for ``seconds``; samples send times."""

    def __init__(self, bench: Bench, rate: int, seconds: float, sample_every: int = 10,
                 names: list[str] | None = None) -> None:
        super().__init__(daemon=True)
        self.bench, self.rate, self.seconds = bench, rate, seconds
        self.names = names or bench.names
        self.sample_every = sample_every
        self.samples: list[tuple[str, int, int, float]] = []  # job, partition, offset, sent
        self.sent = 0

    def run(self) -> None:
        import confluent_kafka as ck

        producer = ck.Producer({"bootstrap.servers": self.bench.bootstrap, "linger.ms": 5,
                                "partitioner": "murmur2_random"})
        streams = {n: self.bench.generators[n].events(10**9) for n in self.names}
        tick = 0.1
        per_tick = self.rate * tick / len(self.names)
        started = time.monotonic()
        owed = 0.0
        while time.monotonic() - started < self.seconds:
            owed += per_tick
            for name in self.names:
                for _ in range(int(owed)):
                    event = next(streams[name])
                    self.sent += 1
                    callback = None
                    if self.sent % self.sample_every == 0:
                        sent_at = time.time()

                        def callback(err: Any, msg: Any, name: str = name,
                                     sent_at: float = sent_at) -> None:
                            if err is None:
                                self.samples.append((name, msg.partition(), msg.offset(),
                                                     sent_at))
                    producer.produce(topic_of(name), key=event.key, value=event.value,
                                     on_delivery=callback)
            owed -= int(owed)
            producer.poll(0)
            time.sleep(max(0.0, started + tick * (1 + int((time.monotonic() - started) / tick))
                           - time.monotonic()))
        producer.flush(60)


def freshness_of(samples: list[tuple[str, int, int, float]], spark: Any,
                 names: list[str]) -> list[float]:
    runs = visible_times(spark, names)
    out = []
    for name, partition, offset, sent in samples:
        for start, end, finished in runs[name]:
            if start.get(partition, 0) <= offset < end.get(partition, 0):
                out.append(finished - sent)
                break
    return out


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def run_for(bench: Bench, names: list[str], seconds: float | None = None,
            until_idle: bool = False) -> Any:
    runner = bench.runner(names, duration_s=seconds, until_idle=until_idle)
    runner.run()
    return runner


def run_while_producing(bench: Bench, names: list[str], producer: SteadyProducer) -> Any:
    """A continuous runner over ``names`` while ``producer`` produces, until it caught up."""
    runner = bench.runner(names)
    thread = threading.Thread(target=runner.run, daemon=True)
    producer.start()
    thread.start()
    producer.join()
    print(f"  produced {producer.sent:,} events; draining ...", flush=True)
    while not runner._idle():
        time.sleep(1)
    runner.stop.set()
    thread.join()
    return runner


def e2e(args: argparse.Namespace) -> None:
    from python_ingest.steps.jobs import run_ingest
    from python_ingest.tables.status import StatusFile

    name = "e2e"
    only = {"topic": topic_of(name), "schema": str(REPO / "schemas" / "trips.avsc"),
            "row_key": ["trip_id"]}
    bench = Bench([name], extra_jobs={"ingest_only": only})
    try:
        spark = bench.session([name])
        gen = bench.generators[name]
        demo.produce(bench.bootstrap, topic_of(name), gen.events(1000))
        print("warm-up: 1,000 events through the pipeline and the ingest-only job", flush=True)
        run_for(bench, [name], until_idle=True)
        run_ingest(spark, bench.settings, bench.settings.job("ingest_only"))
        print(f"producing {args.events:,} events ...", flush=True)
        demo.produce(bench.bootstrap, topic_of(name), gen.events(args.events))
        started = time.perf_counter()
        result = run_ingest(spark, bench.settings, bench.settings.job("ingest_only"))
        ingest_s = time.perf_counter() - started
        assert result.read == args.events, result.read
        print(f"ingest only: {args.events:,} events in {ingest_s:.1f}s", flush=True)
        started = time.perf_counter()
        run_for(bench, [name], until_idle=True)
        pipeline_s = time.perf_counter() - started
        print(f"pipeline: {args.events:,} events in {pipeline_s:.1f}s", flush=True)
        # the warm 100-event batch: a continuous runner in a thread; produce, then watch
        # the status file for the batch that covers it (written once the merge committed)
        runner = bench.runner([name])
        thread = threading.Thread(target=runner.run, daemon=True)
        thread.start()
        status = StatusFile(bench.settings.path(bench.settings.state_dir))
        times = []
        time.sleep(3)
        for _ in range(args.batches):
            sent = demo.produce(bench.bootstrap, topic_of(name), gen.events(100))
            assert sent == 100
            t0 = time.perf_counter()
            end = sum(p.end for p in _ends(bench))
            while True:
                entry = status.read()["jobs"][name]
                done = sum((entry.get("checkpoint") or {}).get("offsets", {}).values())
                if done >= end and entry.get("state") == "idle":
                    break
                time.sleep(0.05)
            times.append(time.perf_counter() - t0)
            print(f"  100-event batch visible after {times[-1]:.2f}s", flush=True)
            time.sleep(1)
        runner.stop.set()
        thread.join()
        batch100 = statistics.median(times)
        lost, doubled = bench.lost_and_doubled()
        assert lost == 0 and doubled == 0, (lost, doubled)
        pipeline_rate = args.events / pipeline_s
        ingest_rate = args.events / ingest_s
        print(f"e2e: events={args.events} pipeline={pipeline_rate:.0f} "
              f"ingest_only={ingest_rate:.0f} ratio={pipeline_rate / ingest_rate:.2f} "
              f"batch100={batch100:.2f}")
    finally:
        bench.close()


def _ends(bench: Bench) -> list[Any]:
    from python_ingest.kafka.client import partition_offsets

    return partition_offsets(bench.bootstrap, topic_of(bench.names[0]))


def steady(args: argparse.Namespace, label: str) -> None:
    names = [f"j{i:02d}" for i in range(args.jobs)]
    bench = Bench(names, runner={"max_parallel_jobs": args.parallel} if args.parallel else None)
    try:
        bench.session(names)
        for name in names:  # a first batch each: tables created, session and dbt warm
            demo.produce(bench.bootstrap, topic_of(name), bench.generators[name].events(20))
        print(f"warm-up: creating {len(names)} jobs' tables ...", flush=True)
        started = time.perf_counter()
        run_for(bench, names, until_idle=True)
        print(f"  warm-up took {time.perf_counter() - started:.0f}s", flush=True)
        producer = SteadyProducer(bench, args.rate, args.seconds)
        print(f"producing {args.rate} events/s over {len(names)} jobs for {args.seconds}s "
              "into a continuous runner ...", flush=True)
        runner = run_while_producing(bench, names, producer)
        fresh = freshness_of(producer.samples, bench.spark, names)
        lost, doubled = bench.lost_and_doubled()
        cycles = []
        for slot in runner.slots.values():
            ends = [r for r in slot.results if r.outcome == "succeeded"]
            cycles.append(len(ends))
        if label == "freshness":
            print(f"freshness: jobs={len(names)} rate={args.rate} p50={pct(fresh, 0.5):.1f} "
                  f"p95={pct(fresh, 0.95):.1f} max={max(fresh, default=float('nan')):.1f} "
                  f"lost={lost} doubled={doubled}")
        else:
            cycle = _cycle_times(bench, names)
            print(f"many: jobs={len(names)} cycle_p95={pct(cycle, 0.95):.1f} "
                  f"freshness_p95={pct(fresh, 0.95):.1f} lost={lost}")
    finally:
        bench.close()


def fleet(args: argparse.Namespace) -> None:
    """Many tables of one source, few of them changing: the idle ones must cost nothing."""
    from python_ingest.runner.scheduler import Runner

    names = [f"t{i:03d}" for i in range(args.jobs)]
    active = names[::max(1, args.jobs // args.active)][:args.active]
    started = time.perf_counter()
    bench = Bench(names, partitions=1)
    polls: list[float] = []
    original = Runner._poll

    def timed(self: Any, offsets: Any) -> None:
        t0 = time.perf_counter()
        try:
            original(self, offsets)
        finally:
            polls.append(time.perf_counter() - t0)

    Runner._poll = timed  # type: ignore[method-assign]
    try:
        print(f"  {len(names)} topics and models in {time.perf_counter() - started:.0f}s",
              flush=True)
        bench.session(names)
        for name in active:  # a first batch each: their tables created, session warm
            demo.produce(bench.bootstrap, topic_of(name), bench.generators[name].events(20))
        print(f"warm-up: the {len(active)} active jobs' first batches (the idle ones none) ...",
              flush=True)
        t0 = time.perf_counter()
        run_for(bench, names, until_idle=True)
        idle_tables = sum(1 for n in names if n not in active
                          and bench.spark.catalog.tableExists(f"raw.{n}"))
        print(f"  warm-up took {time.perf_counter() - t0:.0f}s; idle jobs with tables: "
              f"{idle_tables}", flush=True)
        polls.clear()
        producer = SteadyProducer(bench, args.rate, args.seconds, names=active)
        print(f"producing {args.rate} events/s over {len(active)} of {len(names)} jobs for "
              f"{args.seconds:.0f}s into a continuous runner ...", flush=True)
        run_while_producing(bench, names, producer)
        fresh = freshness_of(producer.samples, bench.spark, active)
        lost, doubled = bench.lost_and_doubled(active)
        cycle = _cycle_times(bench, active)
        print(f"  polls: {len(polls)}, median {pct(polls, 0.5):.3f}s; cycles measured: "
              f"{len(cycle)}; whole bench {time.perf_counter() - started:.0f}s", flush=True)
        print(f"fleet: jobs={len(names)} active={len(active)} cycle_p95={pct(cycle, 0.95):.1f} "
              f"idle_cycle_s={pct(polls, 0.95):.2f} freshness_p95={pct(fresh, 0.95):.1f} "
              f"lost={lost} doubled={doubled}")
    finally:
        Runner._poll = original  # type: ignore[method-assign]
        bench.close()


def _cycle_times(bench: Bench, names: list[str]) -> list[float]:
    """Per job, the time between the ends of consecutive succeeded runs."""
    runs = visible_times(bench.spark, names)
    out = []
    for entries in runs.values():
        ends = sorted(finished for _, _, finished in entries)
        out += [b - a for a, b in zip(ends, ends[1:], strict=False)]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log", metavar="LEVEL",
                        help="python_ingest's log level (INFO: every run's steps and merges)")
    sub = parser.add_subparsers(dest="which", required=True)
    p = sub.add_parser("e2e")
    p.add_argument("--events", type=int, default=500_000)
    p.add_argument("--batches", type=int, default=5, help="100-event batches timed")
    for name, jobs, rate, seconds in (("freshness", 10, 2000, 180), ("many", 50, 5, 600)):
        p = sub.add_parser(name)
        p.add_argument("--jobs", type=int, default=jobs)
        p.add_argument("--rate", type=int, default=rate, help="events/s over all jobs")
        p.add_argument("--seconds", type=float, default=seconds)
        p.add_argument("--parallel", type=int, help="runner.max_parallel_jobs")
    p = sub.add_parser("fleet")
    p.add_argument("--jobs", type=int, default=400)
    p.add_argument("--active", type=int, default=40, help="jobs receiving events")
    p.add_argument("--rate", type=int, default=200, help="events/s over the active jobs")
    p.add_argument("--seconds", type=float, default=300)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="  %(asctime)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    logging.getLogger("python_ingest.runner").setLevel(logging.INFO)
    if args.log:
        logging.getLogger("python_ingest").setLevel(args.log.upper())
    print(f"started {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC", flush=True)
    if args.which == "e2e":
        e2e(args)
    elif args.which == "fleet":
        fleet(args)
    else:
        steady(args, args.which)
    return 0


if __name__ == "__main__":
    sys.exit(main())
