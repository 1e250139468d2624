"""What one small Kafka read costs: the planner's offset look-up and one work unit's range
read, each reader, on a private embedded broker (a free loopback port). A batch reads a few
small ranges (one per work unit) and looks offsets up once a job: on a warm small batch these
fixed costs were a large part of its ingest step.

    .venv/bin/python bench/read_latency.py [--topics 5] [--messages 50]

Prints each reader's median seconds over ``--topics`` topics, then ends with exactly:

    read-latency: messages=<n> offsets_s=<s> kafka_python_s=<s> confluent_kafka_s=<s>
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from python_ingest.kafka import client  # noqa: E402
from python_ingest.kafka.broker import ensure_topic, start_embedded  # noqa: E402
from python_ingest.runtime.processes import free_port  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=5, help="topics read (default 5)")
    parser.add_argument("--messages", type=int, default=50,
                        help="messages in each topic's one partition (default 50)")
    args = parser.parse_args(argv)
    from kafka import KafkaProducer

    port = free_port()
    with tempfile.TemporaryDirectory(prefix="read-latency-") as folder:
        broker = start_embedded(Path(folder) / "broker", "127.0.0.1", port)
        bootstrap = f"127.0.0.1:{port}"
        try:
            producer = KafkaProducer(bootstrap_servers=bootstrap)
            topics = [f"latency_{i}" for i in range(args.topics)]
            for topic in topics:
                ensure_topic(bootstrap, topic, 1)
                for i in range(args.messages):
                    producer.send(topic, b"value %d" % i, key=b"key")
            producer.flush()
            producer.close()
            seconds: dict[str, list[float]] = {"offsets": [], "kafka-python": [],
                                               "confluent-kafka": []}
            for reader in ("kafka-python", "confluent-kafka"):
                for topic in topics:
                    start = time.monotonic()
                    (offsets,) = client.partition_offsets(bootstrap, topic)
                    looked_up = time.monotonic()
                    read = sum(1 for _ in client.read_range(reader, bootstrap, topic, 0,
                                                            offsets.earliest, offsets.end,
                                                            timeout_s=30))
                    seconds["offsets"].append(looked_up - start)
                    seconds[reader].append(time.monotonic() - looked_up)
                    assert read == args.messages, (reader, topic, read)
        finally:
            broker.stop()
    median = {name: statistics.median(values) for name, values in seconds.items()}
    for name, value in median.items():
        print(f"{name:>16}: median {value:.3f} s over {len(seconds[name])} reads")
    print(f"read-latency: messages={args.messages} offsets_s={median['offsets']:.3f} "
          f"kafka_python_s={median['kafka-python']:.3f} "
          f"confluent_kafka_s={median['confluent-kafka']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
