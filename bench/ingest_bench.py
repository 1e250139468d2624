"""Ingestion benchmark: N Avro changelog records (about 150 B, 4 partitions), Kafka → raw Iceberg.

Measured in the same run, on the same broker and the same kind of data:
  baseline  one process consuming every record with confluent-kafka and decoding it with fastavro
            (the fastest reader available here);
  pipeline  a `sluice ingest` run (run_ingest: planning, Spark tasks reading and decoding their
            work units, the raw commit with the checkpoint, the error commit, the run record),
            twice: "cold" is the first Spark job of a fresh JVM (what one `sluice ingest` CLI
            call pays), "warm" is a second topic of the same size in the same session (what a
            long-running scheduler or a later batch pays). Spark start-up is printed apart.
Prints records/s for each and the ratios (target: pipeline >= 60% of baseline).

    .venv/bin/python bench/ingest_bench.py [--records 1000000] [--reader confluent-kafka]
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

import fastavro

from python_ingest.kafka.broker import EmbeddedBroker, start_embedded
from python_ingest.kafka.client import FETCH_BYTES, PARTITION_FETCH_BYTES
from python_ingest.tables.names import JobTables

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TOPIC = "bench.trips"  # the cold run and the baseline
WARM_TOPIC = "bench.trips.warm"
PARTITIONS = 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_broker(data: Path) -> EmbeddedBroker:
    """A private Apache Kafka broker (the embedded one) on a free port."""
    return start_embedded(data, "127.0.0.1", free_port(), heap="1g")


def bench_schema() -> dict:
    """The demo trips schema plus a free-text column, so records are about 150 bytes."""
    schema = json.loads((REPO / "schemas" / "trips.avsc").read_text())
    schema["fields"].insert(8, {"name": "note", "type": ["null", "string"], "default": None})
    return schema


def produce(bootstrap: str, topic: str, records: int, schema: dict) -> float:
    """Produce ``records`` trips events; returns the average value size."""
    import confluent_kafka as ck

    from python_ingest.demo.trips import TripsGenerator
    from python_ingest.kafka.broker import ensure_topic

    ensure_topic(bootstrap, topic, PARTITIONS)
    parsed = fastavro.parse_schema(schema)
    gen = TripsGenerator(parsed, seed=1, malformed_rate=0.0, duplicate_rate=0.0)
    notes = [f"rider asked for a quiet ride, luggage: {i % 4} bags, door code {i:05d}"
             for i in range(1000)]
    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 50,
                            "batch.num.messages": 10000, "queue.buffering.max.messages": 2_000_000})
    total = 0
    for i, event in enumerate(gen.events(records)):
        assert event.record is not None
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, {**event.record, "note": notes[i % 1000]})
        value = out.getvalue()
        total += len(value)
        while True:
            try:
                producer.produce(topic, key=event.key, value=value,
                                 partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 20000 == 0:
            producer.poll(0)
    producer.flush(120)
    return total / records


def baseline(bootstrap: str, records: int, schema: dict) -> float:
    """One process: confluent-kafka consume + fastavro decode of every record; records/s."""
    import confluent_kafka as ck

    parsed = fastavro.parse_schema(schema)
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-baseline",
                            "enable.auto.commit": False, "auto.offset.reset": "earliest",
                            "fetch.max.bytes": FETCH_BYTES,
                            "max.partition.fetch.bytes": PARTITION_FETCH_BYTES,
                            "receive.message.max.bytes": FETCH_BYTES + 1024 * 1024})
    consumer.assign([ck.TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    read = 0
    started = time.perf_counter()
    reader = fastavro.schemaless_reader
    while read < records:
        for message in consumer.consume(20000, timeout=2):
            if message.error():
                continue
            reader(io.BytesIO(message.value()), parsed, parsed)
            read += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return read / elapsed


def pipeline(bootstrap: str, workdir: Path, reader: str, records: int,
             schema: dict, master: str) -> tuple[float, float, float]:
    """Ingest each topic in one run; returns (cold records/s, warm records/s, start-up s)."""
    import yaml

    from python_ingest.config import load_settings
    from python_ingest.runtime.session import build_session
    from python_ingest.steps.jobs import run_ingest

    config = workdir / "sluice.yml"
    (workdir / "bench.avsc").write_text(json.dumps(schema))
    job = {"schema": str(workdir / "bench.avsc"), "row_key": ["trip_id"], "reader": reader,
           "max_records": records, "records_per_task": records}
    config.write_text(yaml.safe_dump({
        "spark": {"master": master},
        "catalog": {"warehouse": str(workdir / "warehouse")},
        "broker": {"bootstrap_servers": bootstrap, "embedded": False},
        "state_dir": str(REPO / ".sluice"),
        "jobs": {"cold": {**job, "topic": TOPIC}, "warm": {**job, "topic": WARM_TOPIC}},
    }))
    settings = load_settings(config, env={})
    started = time.perf_counter()
    spark = build_session(settings)
    session_s = time.perf_counter() - started
    rates = []
    for name in ("cold", "warm"):
        job_config = settings.job(name)
        started = time.perf_counter()
        result = run_ingest(spark, settings, job_config)
        rates.append(result.read / (time.perf_counter() - started))
        landed = spark.table(JobTables(job_config.name).raw).count()
        assert landed == result.read == records, f"{name}: landed {landed} of {records}"
    spark.stop()
    return rates[0], rates[1], session_s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--reader", default="confluent-kafka",
                        choices=("confluent-kafka", "kafka-python"))
    args = parser.parse_args()
    import logging

    logging.basicConfig(level=logging.INFO, format="  %(asctime)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    logging.getLogger("kafka").setLevel(logging.WARNING)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    schema = bench_schema()
    workdir = Path(tempfile.mkdtemp(prefix="sluice-bench-"))
    kafka = start_broker(workdir / "broker")
    bootstrap = kafka.bootstrap
    try:
        print(f"producing {args.records:,} records to each of {TOPIC} and {WARM_TOPIC} "
              f"({PARTITIONS} partitions) ...", flush=True)
        size = produce(bootstrap, TOPIC, args.records, schema)
        produce(bootstrap, WARM_TOPIC, args.records, schema)
        print(f"  average value size {size:.0f} B", flush=True)
        base = baseline(bootstrap, args.records, schema)
        print(f"baseline  confluent-kafka + fastavro, one process: {base:,.0f} records/s",
              flush=True)
        cold, warm, session_s = pipeline(bootstrap, workdir, args.reader, args.records, schema,
                                         args.master)
        print(f"pipeline  sluice ingest ({args.reader} reader, {args.master}) Kafka -> raw "
              f"Iceberg, Spark start-up {session_s:.1f}s not included:")
        print(f"  cold (first run of a fresh JVM): {cold:,.0f} records/s  "
              f"ratio {cold / base:.2f}")
        print(f"  warm (second run, same session): {warm:,.0f} records/s  "
              f"ratio {warm / base:.2f}   (target >= 0.60)")
    finally:
        kafka.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
