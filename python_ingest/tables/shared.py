"""Writes to the tables every job's runs share (``meta.runs``) when the warehouse is on S3.

On a file system with an atomic create (local disk, HDFS) Hudi serializes such writes itself:
optimistic concurrency with a lock file beside the table (``runtime.catalog``,
``SHARED_WRITE_CONF``), and Iceberg's Hadoop catalog commits by an atomic rename. S3 has
neither (Hudi refuses its ``FileSystemBasedLockProvider`` on ``s3a://``; S3A's rename checks,
then copies), and Hudi's lock providers that work there need a server (ZooKeeper, DynamoDB, a
Hive Metastore). So on S3 sluice takes a lease of its own per shared table
(``meta/.sluice_locks/<table>``: the job leases' compare-and-swap, a conditional put on S3)
around each write: one writer at a time, in any process on any host, and Hudi writes the
table as a single writer (a writer that died mid-commit is rolled back by the next one).

A job's own tables need no lock anywhere: only the holder of the job's lease writes them.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from python_ingest.config.s3 import on_object_store
from python_ingest.runtime.catalog import WAREHOUSE_CONF, shared_table
from python_ingest.tables.lease import LeaseHeldError, claim, release

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

LOCK_DIR = "meta/.sluice_locks"
LOCK_TTL_S = 120.0  # a dead writer's lock (another host) is waited out this long at most
WAIT_S = 600.0  # a writer waits this long for the lock before its write fails


def locked_on_s3(spark: SparkSession, table: str) -> bool:
    """Whether writes to ``table`` take sluice's lock (a shared table, the warehouse on S3)."""
    return shared_table(table) and on_object_store(str(spark.conf.get(WAREHOUSE_CONF, "")))


@contextmanager
def shared_write(spark: SparkSession, table: str) -> Iterator[None]:
    """Hold ``table``'s lock while the block writes it (nothing to hold unless
    ``locked_on_s3``)."""
    if not locked_on_s3(spark, table):
        yield
        return
    name = table.replace("`", "").replace(".", "__")
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            lock = claim(spark, name, LOCK_DIR, ttl_s=LOCK_TTL_S, renew_s=LOCK_TTL_S / 4)
            break
        except LeaseHeldError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2 + random.random() * 0.3)
    try:
        yield
    finally:
        release(lock)
