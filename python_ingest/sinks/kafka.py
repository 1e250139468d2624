"""The Kafka sink: a topic keyed by row key, Avro values, a null value for a deleted row
(what log compaction removes), at least once (docs/dispersal.md, "Kafka").

Values are Avro binary without framing (fastavro, schemaless), written with a schema made
from the lake table's columns (``avro_schema``); each field is nullable. The producer is
idempotent (acks=all): a retried send is not written twice. The position is stored
(``state.PositionFile``) only after the broker acknowledged every message of the range.
"""

from __future__ import annotations

import io
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from python_ingest.config.dispersal import KafkaTarget
from python_ingest.config.secrets import redact
from python_ingest.exceptions import BrokerError, DispersalError, DispersalPositionError
from python_ingest.kafka import security
from python_ingest.runtime.faults import fault_point
from python_ingest.sinks.changes import DELETE, OP, Position, changes, target_columns
from python_ingest.sinks.result import DispersalResult
from python_ingest.sinks.state import PositionFile
from python_ingest.tables.names import JobTables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

PARTITIONS = 3  # of a topic the sink creates (compacted)
FLUSH_TIMEOUT_S = 120.0
SCALARS: dict[str, Any] = {
    "tinyint": "int", "smallint": "int", "int": "int", "bigint": "long", "float": "float",
    "double": "double", "string": "string", "boolean": "boolean", "binary": "bytes",
    "date": {"type": "int", "logicalType": "date"},
    "timestamp": {"type": "long", "logicalType": "timestamp-micros"},
    "timestamp_ntz": {"type": "long", "logicalType": "local-timestamp-micros"},
}


def avro_type(data_type: Any, path: str) -> Any:
    """The Avro type of a Spark ``DataType`` (nested types recursively, nullable inside)."""
    from pyspark.sql import types as T

    simple = data_type.simpleString()
    if simple in SCALARS:
        return SCALARS[simple]
    if simple.startswith(("varchar(", "char(")):
        return "string"
    if isinstance(data_type, T.DecimalType):
        return {"type": "bytes", "logicalType": "decimal", "precision": data_type.precision,
                "scale": data_type.scale}
    if isinstance(data_type, T.ArrayType):
        return {"type": "array", "items": ["null", avro_type(data_type.elementType, path)]}
    if isinstance(data_type, T.MapType):
        return {"type": "map", "values": ["null", avro_type(data_type.valueType, path)]}
    if isinstance(data_type, T.StructType):
        name = re.sub(r"[^A-Za-z0-9_]", "_", path)
        return {"type": "record", "name": name, "fields": [
            {"name": f.name, "type": ["null", avro_type(f.dataType, f"{path}_{f.name}")],
             "default": None} for f in data_type.fields]}
    raise DispersalError(f"lake column type {simple} has no Avro mapping yet; cast it in the "
                         "lake model (docs/dispersal.md, Type mapping)")


def avro_schema(spark: SparkSession, tables: JobTables) -> dict[str, Any]:
    """The value schema: a record named after the job with the target columns, nullable."""
    from python_ingest.sinks.changes import lake_frame

    names = {n for n, _ in target_columns(spark, tables)}
    fields = [f for f in lake_frame(spark, tables).schema.fields if f.name in names]
    return {"type": "record", "name": tables.job, "namespace": "sluice.lake",
            "fields": [{"name": f.name, "type": ["null", avro_type(f.dataType, f.name)],
                        "default": None} for f in fields]}


def _plain(value: Any) -> Any:
    """A collected Spark value as fastavro takes it (rows as dicts, bytearrays as bytes)."""
    from pyspark.sql import Row

    if isinstance(value, Row):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def _messages(frame: Any, schema: dict[str, Any]) -> Iterator[tuple[bytes, bytes | None]]:
    """(key, value) per change; the frame's dates and timestamps arrive as Avro's integers."""
    import fastavro

    parsed = fastavro.parse_schema(schema)
    for row in frame.toLocalIterator(prefetchPartitions=True):
        data = row.asDict()
        key = str(data["_row_key"]).encode()
        if data.pop(OP) == DELETE:
            yield key, None
            continue
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, {k: _plain(v) for k, v in data.items()})
        yield key, out.getvalue()


def disperse_kafka(spark: SparkSession, tables: JobTables, target: KafkaTarget,
                   until: Position, state_dir: Path, bootstrap: str) -> DispersalResult:
    """Send the changes since the stored position, wait for every ack, then store ``until``
    (in ``state_dir``, beside the positions of the same warehouse's other targets)."""
    from pyspark.sql import functions as F

    from python_ingest.kafka.broker import ensure_topic

    store = PositionFile(state_dir, warehouse(spark), tables.job, target.name)
    since = store.read()
    if since is not None and since.batch_id > until.batch_id:
        raise DispersalPositionError(target.name, f"it holds batch {since.batch_id} but the "
                                     f"lake is at batch {until.batch_id}")
    if since is not None and since.batch_id == until.batch_id:
        return DispersalResult(tables.job, target.name, since, until, 0, 0, 0.0)
    started = time.monotonic()
    ensure_topic(bootstrap, target.topic, PARTITIONS, {"cleanup.policy": "compact"})
    columns = target_columns(spark, tables)
    frame = changes(spark, tables, since, until)
    for name, spark_type in columns:  # Avro's date and timestamp integers, made by Spark
        if spark_type == "date":
            frame = frame.withColumn(name, F.unix_date(F.col(f"`{name}`")))
        elif spark_type in ("timestamp", "timestamp_ntz"):
            frame = frame.withColumn(name, F.unix_micros(F.col(f"`{name}`").cast("timestamp")))
    producer = _producer(bootstrap, target.name)
    failures: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    upserted = deleted = 0
    for key, value in _messages(frame, avro_schema(spark, tables)):
        while True:
            try:
                producer.produce(target.topic, key=key, value=value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        upserted, deleted = (upserted + 1, deleted) if value is not None else \
            (upserted, deleted + 1)
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    if failures or remaining:
        why = failures[0] if failures else "timed out"
        if security.is_security(why):  # no ACL to write the topic: say which, stop
            raise security.failure(bootstrap, f"dispersal target {target.name}", why,
                                   action="write", resource=f"topic '{target.topic}'")
        raise BrokerError(redact(  # a password in bootstrap_servers never shows (#35.5)
            f"dispersal target {target.name}: the broker at {bootstrap} did not acknowledge "
            f"{remaining or len(failures)} message(s) ({why}); the position stays where it "
            "was, so the next dispersal sends them again"))
    fault_point("disperse_before_position")
    store.write(until, target.topic)
    seconds = time.monotonic() - started
    log.info("dispersed %s to topic %s: %d upserts, %d deletes in %.1fs", tables.lake,
             target.topic, upserted, deleted, seconds)
    return DispersalResult(tables.job, target.name, since, until, upserted, deleted, seconds)


def warehouse(spark: SparkSession) -> str:
    """The session's warehouse (what a position file is tied to)."""
    from python_ingest.runtime.catalog import WAREHOUSE_CONF

    return str(spark.conf.get(WAREHOUSE_CONF))


def _producer(bootstrap: str, target: str = "") -> Any:
    """An idempotent producer (acks from all replicas; a retry is never written twice)."""
    import confluent_kafka as ck

    return ck.Producer(security.librdkafka(bootstrap, {
        "acks": "all", "enable.idempotence": True, "linger.ms": 20,
        "partitioner": "murmur2_random", "message.timeout.ms": 120_000,
        "queue.buffering.max.messages": 500_000}, f"dispersal target {target}".strip()))

