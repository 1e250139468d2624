"""The warehouse on S3: Spark's S3A settings, and the one atomic step S3A lacks.

``s3_conf`` turns ``catalog.s3`` (config/s3.py) into ``spark.hadoop.fs.s3a.*`` settings: the
endpoint, path-style access, the region and where the keys come from. An access key read by
the driver reaches Spark only as ``fs.s3a.access.key`` / ``fs.s3a.secret.key``, keys Spark
redacts in its UI, logs and event logs (``spark.redaction.regex``); sluice never logs them.

``put_if_absent`` is the compare-and-swap the job leases and runner claims need
(tables/lease.py): create an object only if no object has its key, atomically, by S3's
conditional ``PutObject`` (``If-None-Match: *``; S3 has it since 2024, S3Proxy and the other
S3-compatible servers that matter too). Hadoop 3.3.4's S3A has no such call (its
``create(path, false)`` checks, then writes; its rename copies), so the put goes through the
S3 client of the very S3A file system the lease uses: same endpoint, same credentials, same
retries. S3 answers a put whose key exists with 412 (Precondition Failed), and a put racing
another on the same key may get 409 (ConditionalRequestConflict): both mean "not yours".
Listings and reads after a write are strongly consistent on S3 (since 2020), which the lease's
other steps rely on.
"""

from __future__ import annotations

import logging
from typing import Any

from python_ingest.config.catalog import CatalogConfig
from python_ingest.config.s3 import on_object_store

log = logging.getLogger(__name__)

HADOOP = "spark.hadoop.fs.s3a."
SIMPLE_PROVIDER = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
REFUSED = (412, 409)  # the key exists / a concurrent conditional put on it won


def s3_conf(catalog: CatalogConfig, warehouse: str) -> dict[str, str]:
    """Spark's S3A settings for a warehouse on S3 (nothing for any other warehouse)."""
    if not on_object_store(warehouse):
        return {}
    s3 = catalog.s3
    conf = {
        # keep a folder's marker object when a file is written below it: S3A 3.3's default
        # deletes every parent's marker after each write (a request per level per file)
        HADOOP + "directory.marker.retention": "keep",
        # a short outage of the store is waited out (S3A retries with backoff, ~1 min)
        HADOOP + "retry.limit": "10",
        HADOOP + "retry.interval": "1s",
    }
    if s3.endpoint:
        conf[HADOOP + "endpoint"] = s3.endpoint
        conf[HADOOP + "connection.ssl.enabled"] = str(
            not s3.endpoint.startswith("http://")).lower()
    if s3.path_style:
        conf[HADOOP + "path.style.access"] = "true"
    if s3.region:
        conf[HADOOP + "endpoint.region"] = s3.region
    keys = s3.reveal_keys()
    if keys is not None:
        conf[HADOOP + "aws.credentials.provider"] = SIMPLE_PROVIDER
        conf[HADOOP + "access.key"], conf[HADOOP + "secret.key"] = keys
    return conf


def is_s3(fs: Any) -> bool:
    """Whether a Hadoop FileSystem (a py4j handle) is S3A."""
    return str(fs.getScheme()) in ("s3a", "s3", "s3n")


def put_if_absent(fs: Any, path: Any, data: bytes) -> bool:
    """Create the object at ``path`` (a Hadoop Path of the S3A file system ``fs``) holding
    ``data``, only if no object has its key: whether this call created it."""
    gateway = _gateway()
    s3 = gateway.jvm.com.amazonaws.services.s3
    client = fs.getAmazonS3ClientForTesting("sluice lease: conditional put")
    key = fs.pathToKey(fs.makeQualified(path))
    metadata = s3.model.ObjectMetadata()
    metadata.setContentLength(len(data))
    metadata.setContentType("application/json")
    stream = gateway.jvm.java.io.ByteArrayInputStream(bytearray(data))
    request = s3.model.PutObjectRequest(fs.getBucket(), key, stream, metadata)
    request.putCustomRequestHeader("If-None-Match", "*")
    try:
        client.putObject(request)
        return True
    except Exception as exc:
        status = _status(exc)
        if status in REFUSED:
            log.debug("conditional put of %s refused (%s): the key exists", key, status)
            return False
        raise


def _status(exc: Exception) -> int | None:
    """The HTTP status of an AmazonS3Exception raised through py4j (None: another error)."""
    java = getattr(exc, "java_exception", None)
    if java is None:
        return None
    try:
        return int(java.getStatusCode())
    except Exception:
        return None


def _gateway() -> Any:
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is None or context._gateway is None:
        raise RuntimeError("put_if_absent needs the running Spark session's JVM")
    return context._gateway
