"""One value never stops a source: changes that cannot be published as they are.

A value that cannot be converted (``events.Problem``), encoded (fastavro refuses it), or that
makes the message larger than Kafka takes (``MAX_MESSAGE_BYTES``: Kafka's default 1 MB less
the client's per-message overhead) is set to null: the change is published without it and an
error record says which table, position, column and why. A change whose key cannot be built,
or a message the Kafka client still refuses as too large, is not published; its error record
says so.

The error records go to one topic per source, ``<topic_prefix>.__tap_errors`` (schema
``registry.ERROR_SCHEMA`` in ``<registry>/__tap_errors``); the job ``<source>__tap_errors``
(added by ``sluice tap --scaffold`` / ``--print-jobs``) lands them in
``raw.<source>__tap_errors`` and ``lake.<source>__tap_errors`` on ``sluice run``.
"""

from __future__ import annotations

import logging
from pathlib import Path

from python_ingest.config import SourceConfig
from python_ingest.exceptions import MessageTooLargeError, TapError
from python_ingest.kafka import client as kafka_client
from python_ingest.sources.tap.changes import Change, Envelope, Problem, preview
from python_ingest.sources.tap.producer import ChangelogProducer, Encoder
from python_ingest.sources.tap.registry import ERROR_SCHEMA, Registry

log = logging.getLogger(__name__)

ERRORS_FOLDER = "__tap_errors"
KAFKA_MESSAGE_LIMIT = 1_000_000  # librdkafka's message.max.bytes; a broker takes 1048588
# librdkafka counts a message as key + value + its record overhead (at most 36 bytes:
# RD_KAFKAP_MESSAGE_V2_MAX_OVERHEAD) and refuses one over the limit: before issue #9.11 a
# message of 999 965 .. 1 000 000 bytes passed the check here and crashed the tap, on every start
MESSAGE_OVERHEAD = 36
MAX_MESSAGE_BYTES = KAFKA_MESSAGE_LIMIT - MESSAGE_OVERHEAD  # for key + value
# What a table's topic must take (its max.message.bytes, checked for a record batch): one
# message of KAFKA_MESSAGE_LIMIT plus the batch header (61 bytes), as the producer's batches are
# at most that large too. A topic that takes less stops its table (tap.py), never the tap.
TOPIC_BYTES_NEEDED = KAFKA_MESSAGE_LIMIT + 61


def check_topic_limit(bootstrap: str, topic: str) -> None:
    """Raise TapError when ``topic`` takes smaller messages than the tap may write."""
    limit = kafka_client.max_message_bytes(bootstrap, topic)
    if limit < TOPIC_BYTES_NEEDED:
        raise TapError(f"topic {topic} takes messages of at most {limit} bytes "
                       f"(max.message.bytes), less than the {TOPIC_BYTES_NEEDED} a change may "
                       f"need (Kafka's default is 1048588): its broker would refuse a large "
                       f"change and stop the whole tap. Raise the topic's max.message.bytes to "
                       f"at least {TOPIC_BYTES_NEEDED}, then bootstrap the table "
                       "(docs/binlog-tap.md)")


def error_topic(source: SourceConfig) -> str:
    return f"{source.topic_base}.__tap_errors"


def error_job(source: SourceConfig) -> str:
    return f"{source.name}__tap_errors"


def register_errors(registry_root: Path) -> int:
    """The error schema's id in the source's registry (registered when missing)."""
    return Registry(registry_root / ERRORS_FOLDER).register_schema(ERROR_SCHEMA)


class ErrorSink:
    """Publishes error records of one source (and counts them)."""

    def __init__(self, producer: ChangelogProducer, source: SourceConfig,
                 registry_root: Path) -> None:
        self.producer = producer
        self.topic = error_topic(source)
        schema_id = register_errors(registry_root)
        self.encoder = Encoder(schema_id, ERROR_SCHEMA)
        self.reported = 0

    def report(self, table: str, change: Change, problem: Problem, where: tuple[str, int] | None,
               env: Envelope, published: bool) -> None:
        ref = int(change.record["_ref_key"])
        error_id = f"{table}@{ref}" + (f":{problem.column}" if problem.column else "")
        record = {
            "error_id": error_id, "table_name": table, "operation": change.op,
            "binlog_file": where[0] if where else None, "binlog_pos": where[1] if where else None,
            "column_name": problem.column, "error": problem.reason, "value_text": problem.value,
            "row_key": change.key, "published": published, "_ref_key": ref,
            "_changed_columns": None, "_source": env.source, "_event_ts": env.event_ts_ms,
            "_is_deleted": False, "_force_update": False, "_data_center": env.data_center,
        }
        log.error("%s at %s: %s%s (%s)", table, f"{where[0]}:{where[1]}" if where else "snapshot",
                  f"column {problem.column}: " if problem.column else "", problem.reason,
                  "published without the value" if published else "not published")
        self.producer.send(self.topic, error_id.encode("utf-8"), self.encoder.encode(record))
        self.reported += 1


def _encode(encoder: Encoder, change: Change, problems: list[Problem]) -> bytes | None:
    """Encode the change's record; values fastavro refuses become null (and problems)."""
    try:
        return encoder.encode(dict(change.record))
    except Exception as exc:
        failing = encoder.failing_fields(change.record)
        if not failing:
            problems.append(Problem(None, f"cannot encode the change: {type(exc).__name__}: "
                                    f"{exc}"))
            return None
    for name, reason in failing:
        problems.append(Problem(name, f"cannot encode the value: {reason}",
                                preview(change.record.get(name))))
        change.record[name] = None
    try:
        return encoder.encode(dict(change.record))
    except Exception as exc:
        problems.append(Problem(None, f"cannot encode the change: {type(exc).__name__}: {exc}"))
        return None


def _wire(key: bytes, value: bytes) -> int:
    """A message's size as the Kafka client counts it against its limit."""
    return len(key) + len(value) + MESSAGE_OVERHEAD


def _fit(encoder: Encoder, change: Change, key: bytes, value: bytes, keep: set[str],
         problems: list[Problem]) -> bytes | None:
    """Null the largest values until the message fits MAX_MESSAGE_BYTES."""
    sizes = sorted(((len(v) if isinstance(v, bytes | str) else 0, n)
                    for n, v in change.record.items()
                    if not n.startswith("_") and n not in keep and v is not None), reverse=True)
    for size, name in sizes:
        if len(key) + len(value) <= MAX_MESSAGE_BYTES or size == 0:
            break
        problems.append(Problem(name, f"the message would be {_wire(key, value)} bytes, over "
                                f"Kafka's limit of {KAFKA_MESSAGE_LIMIT}: the value is left out",
                                preview(change.record[name])))
        change.record[name] = None
        value = encoder.encode(dict(change.record))
    return value if len(key) + len(value) <= MAX_MESSAGE_BYTES else None


def publish(producer: ChangelogProducer, topic: str, encoder: Encoder, change: Change,
            key_columns: tuple[str, ...], sink: ErrorSink | None, table: str,
            where: tuple[str, int] | None, env: Envelope) -> bool:
    """Send one change (see the module doc); True when it was published."""
    problems = list(change.problems)
    value = None
    if change.key is not None:
        key = change.key.encode("utf-8")
        value = _encode(encoder, change, problems)
        if value is not None and len(key) + len(value) > MAX_MESSAGE_BYTES:
            value = _fit(encoder, change, key, value, set(key_columns), problems)
            if value is None:
                problems.append(Problem(None, "the change does not fit in a Kafka message even "
                                        "without its largest values"))
        if value is not None:
            try:
                producer.send(topic, key, value)
            except MessageTooLargeError as exc:  # the client counts otherwise: still never stop
                problems.append(Problem(None, f"{exc}: the change is not published"))
                value = None
    if problems:
        if sink is None:
            raise ValueError(f"{table}: {problems[0].column}: {problems[0].reason}")
        for problem in problems:
            sink.report(table, change, problem, where, env, value is not None)
    return value is not None
