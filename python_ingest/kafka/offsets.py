"""End offsets of many topics from one long-lived Kafka connection.

A continuous runner asks, every poll interval, whether each job's topic holds messages past
the job's checkpoint. One consumer kept open answers for every topic in one request per
broker (a fresh consumer per job and poll would cost a connection and a metadata round trip
each), and no Spark job runs for a job with nothing new.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from python_ingest.exceptions import BrokerError
from python_ingest.kafka import security

log = logging.getLogger(__name__)


class EndOffsets:
    """``end(topics)`` → {topic: {partition: end offset}}; topics that do not exist are absent."""

    def __init__(self, bootstrap: str, timeout_s: float = 15.0) -> None:
        self.bootstrap = bootstrap
        self.timeout_ms = int(timeout_s * 1000)
        self._consumer: Any = None

    def _client(self) -> Any:
        if self._consumer is None:
            from kafka import KafkaConsumer
            from kafka.errors import KafkaError

            try:
                self._consumer = KafkaConsumer(**security.kafka_python(
                    self.bootstrap, "sluice watching its jobs' topics (a runner)",
                    enable_auto_commit=False, request_timeout_ms=self.timeout_ms,
                    bootstrap_timeout_ms=self.timeout_ms))
            except KafkaError as exc:
                raise BrokerError(f"cannot reach the Kafka broker at {self.bootstrap}: "
                                  f"{exc}") from exc
        return self._consumer

    def end(self, topics: Iterable[str]) -> dict[str, dict[int, int]]:
        from kafka import TopicPartition
        from kafka.errors import KafkaError

        consumer = self._client()
        try:
            known = consumer.topics()  # refreshes metadata: new topics and partitions appear
            partitions = [TopicPartition(t, p) for t in sorted(set(topics)) if t in known
                          for p in sorted(consumer.partitions_for_topic(t) or ())]
            ends = consumer.end_offsets(partitions) if partitions else {}
        except KafkaError as exc:
            self.close()  # reconnect on the next poll
            raise BrokerError(f"cannot read end offsets from {self.bootstrap}: {exc}") from exc
        out: dict[str, dict[int, int]] = {}
        for tp, end in ends.items():
            out.setdefault(tp.topic, {})[tp.partition] = int(end)
        return out

    def close(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception:  # closing a broken connection
                log.debug("closing the offsets consumer failed", exc_info=True)
            self._consumer = None


class ClusterEnds:
    """End offsets of each job's topic on its own cluster (``Settings.kafka_for``: a job's
    ``broker:`` or the project's), one EndOffsets per cluster. ``end({job: (servers,
    topic)}, problems)`` → {job: {partition: end}}: a job whose cluster did not answer is
    absent and the cluster's error is added to ``problems`` (the other clusters still
    answer); without ``problems`` the first error is raised."""

    def __init__(self, timeout_s: float = 15.0) -> None:
        self.timeout_s = timeout_s
        self._clusters: dict[tuple[str, str], EndOffsets] = {}

    def end(self, wanted: Mapping[str, tuple[str, str]], problems: list[str] | None = None
            ) -> dict[str, dict[int, int]]:
        by_cluster: dict[tuple[str, str], list[str]] = {}
        for job, (servers, _) in wanted.items():
            key = (str(servers), repr(security.security_of(servers)))
            by_cluster.setdefault(key, []).append(job)
            if key not in self._clusters:
                self._clusters[key] = EndOffsets(servers, self.timeout_s)
        out: dict[str, dict[int, int]] = {}
        for key, jobs in by_cluster.items():
            try:
                ends = self._clusters[key].end({wanted[j][1] for j in jobs})
            except BrokerError as exc:
                if problems is None:
                    raise
                problems.append(str(exc))
                continue
            out.update({j: ends.get(wanted[j][1], {}) for j in jobs})
        return out

    def close(self) -> None:
        for watcher in self._clusters.values():
            watcher.close()


def backlog(ends: Mapping[int, int], checkpoint: Mapping[str, Any] | None) -> int | None:
    """Messages past the checkpoint (None: the job has no checkpoint yet, so it is unknown)."""
    if checkpoint is None:
        return None
    offsets = {int(p): int(o) for p, o in (checkpoint.get("offsets") or {}).items()}
    return sum(max(0, end - offsets.get(p, 0)) for p, end in ends.items())
