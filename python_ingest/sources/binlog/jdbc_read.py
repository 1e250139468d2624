"""The direct bootstrap's read in the JVM (issue #62): a wave's chunks as one Spark JDBC read,
one partition per chunk, each chunk in its own consistent snapshot at its exact binlog
position, its rows as raw rows without a Python row loop.

Each partition's connection (MariaDB's JDBC driver, pinned in jvm/spark/pom.xml) runs, in
``sessionInitStatement``, ``START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY`` (UTC
session, REPEATABLE READ); its query then selects, with the chunk's rows, the snapshot's
``binlog_snapshot_file``/``binlog_snapshot_position`` from ``information_schema.
SESSION_STATUS``: inside that transaction MariaDB reports the snapshot's position there, not
the current one (checked in this issue: a snapshot at 1200, commits up to 2048 made by another
session meanwhile, the query's columns say 1200), so every row carries its own chunk's
``P_i``, the ref key the Python read (bulk_read.py) gives it.

Values are the tap's (sources/binlog/columns.py ``to_avro``) computed from what the server
sends: integers and decimals as they are, FLOAT widened to DOUBLE and back (exact), text in
Unicode, DATE/DATETIME/TIMESTAMP from their year, month, day and microseconds of the day
(UTC session) by the tap's proleptic day count, zero and invalid dates NULL in a nullable
column and the documented day before year 0 (``values.zero_day``) in a NOT NULL one. Tables
with a kind outside ``KINDS``, a synthetic or composite text key, client certificates, or a
server that reports no snapshot position take the Python read (``jvm_unfit`` says why).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from python_ingest.changelog.keys import EMPTY_KEY
from python_ingest.config import SourceConfig
from python_ingest.sources.binlog import server
from python_ingest.sources.binlog.bootstrap import chunk_predicate
from python_ingest.sources.binlog.events import TappedTable
from python_ingest.sources.binlog.position import GENERATION_SHIFT, OFFSET_BITS
from python_ingest.sources.binlog.values import ZERO_DAY
from python_ingest.sources.kafka.reader import ReadSpec
from python_ingest.sources.tap.chunks import Chunk

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

KINDS = frozenset({"long", "ulong", "float", "double", "decimal", "string", "bytes", "enum",
                   "set", "date", "datetime", "timestamp", "bool", "bit"})
KEY_KINDS = frozenset({"long", "string"})  # whose _row_key text Spark's cast gives as Arrow's
DATES = ("date", "datetime", "timestamp")
FETCH_ROWS = 10_000
INIT = ("SET SESSION sql_mode = CONCAT(@@sql_mode, ',ANSI_QUOTES'), time_zone = '+00:00'; "
        "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ; "
        "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
_STATUS = ("(SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS "
           "WHERE VARIABLE_NAME = '{}')")


@dataclass(frozen=True)
class JdbcRead:
    """What a wave's JVM read needs."""

    source: SourceConfig
    table: TappedTable
    spec: ReadSpec  # the job's raw columns, the batch's id and landing time
    generation: int  # the tap's ref key generation on this server (position.py)
    event_ms: int  # _event_ts and _kafka_timestamp of the bootstrap's rows


def _tls(source: SourceConfig) -> str | None:
    """The driver's TLS options matching tls.options (None: not expressible here)."""
    mode = source.sslmode
    if source.sslcert:
        return None  # client certificates: the Python read
    if mode in (None, "disable", "allow", "prefer") and not source.sslrootcert:
        return "sslMode=disable"  # what pymysql does with these (tls.options: no TLS)
    if mode == "require" and not source.sslrootcert:
        return "sslMode=trust"
    if mode in ("require", "verify-ca", "verify-full") and source.sslrootcert:
        checked = "verify-full" if mode == "verify-full" else "verify-ca"
        return f"sslMode={checked}&serverSslCert={source.sslrootcert}"
    return None


def jvm_unfit(source: SourceConfig, table: TappedTable, conn: Any) -> str | None:
    """Why the table's chunks cannot be read in the JVM (None: they can)."""
    shape = table.shape
    if source.kind != "mariadb":
        return f"source kind {source.kind} (no snapshot position in the session's status)"
    if _tls(source) is None:
        return "TLS options the JDBC read does not take (client certificate)"
    if shape.key.kind not in ("primary", "unique", "columns") or shape.key.synthetic:
        return f"row key {shape.key.kind} (synthetic)"
    keys = [shape.spec(c) for c in shape.key.columns]
    if any(s.kind not in KEY_KINDS for s in keys) or (len(keys) > 1 and any(
            s.kind == "string" for s in keys)):
        return "key columns whose row key text is made in Python"
    odd = [s.name for s in shape.columns if s.kind not in KINDS]
    if odd:
        return f"column(s) {', '.join(odd)} of kinds the JDBC read does not convert"
    with conn.cursor() as cur:  # a snapshot's position must be reported in its session
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        cur.execute("SHOW STATUS LIKE 'binlog_snapshot_file'")
        row = cur.fetchone()
        cur.execute("ROLLBACK")
    if not row or not row[1]:
        return "the server reports no binlog_snapshot_file"
    return None


def _literal(value: Any) -> str:
    import pymysql.converters

    return str(pymysql.converters.escape_item(value, "utf8mb4"))


def predicate(table: TappedTable, chunk: Chunk) -> str:
    """The chunk's condition with its bounds as literals (pymysql's own escaping, as the
    Python read sends them)."""
    where, params = chunk_predicate(table.shape.key.columns, chunk)
    return where % tuple(_literal(p) for p in params) if params else where


def _columns_sql(table: TappedTable) -> str:
    """The server side: each column in a form the driver reads exactly, dates as parts; the
    key columns as they are (the chunks' conditions on them must use the key's index)."""
    out = []
    for spec in table.shape.columns:
        q = server.quote(spec.name)
        kind = spec.kind
        if kind in DATES:
            parts = [f"YEAR({q})", f"MONTH({q})", f"DAYOFMONTH({q})"]
            if kind != "date":
                parts.append(f"(HOUR({q}) * 3600 + MINUTE({q}) * 60 + SECOND({q})) * 1000000 "
                             f"+ MICROSECOND({q})")
            out += [f"CAST({p} AS SIGNED) AS {server.quote(f'{spec.name}__{i}')}"
                    for i, p in enumerate(parts)]
        elif kind in ("bit", "bool"):
            out.append(f"CAST({q} + 0 AS SIGNED) AS {q}")
        elif kind == "ulong":
            out.append(f"CAST({q} AS DECIMAL(20,0)) AS {q}")
        elif kind in ("float", "double"):
            out.append(f"CAST({q} AS DOUBLE) AS {q}")
        else:
            out.append(q)
    out.append(f"{_STATUS.format('BINLOG_SNAPSHOT_FILE')} AS sluice__file")
    out.append(f"CAST({_STATUS.format('BINLOG_SNAPSHOT_POSITION')} AS UNSIGNED) AS sluice__pos")
    name = f"{server.quote(table.shape.db)}.{server.quote(table.shape.table)}"
    return f"(SELECT {', '.join(out)} FROM {name}) sluice_chunk"


def _days(name: str, nullable: bool) -> str:
    """Spark SQL: days since 1970-01-01 of the parts (values.py days_from_civil, zero_day)."""
    y, m, d = (f"`{name}__{i}`" for i in range(3))
    yy = f"({y} - IF({m} <= 2, 1, 0))"
    era = f"floor({yy} / 400)"
    yoe = f"({yy} - {era} * 400)"
    doy = f"((153 * ({m} + IF({m} > 2, -3, 9)) + 2) div 5 + {d} - 1)"
    doe = f"({yoe} * 365 + {yoe} div 4 - {yoe} div 100 + {doy})"
    leap = f"IF({y} % 4 = 0 AND ({y} % 100 <> 0 OR {y} % 400 = 0), 1, 0)"
    last = (f"element_at(array(31, 28 + {leap}, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31), "
            f"CAST({m} AS INT))")
    valid = f"CASE WHEN {m} BETWEEN 1 AND 12 AND {d} >= 1 THEN {d} <= {last} ELSE false END"
    invalid = "NULL" if nullable else f"({ZERO_DAY} - ({y} * 416 + {m} * 32 + {d}))"
    return (f"CASE WHEN {y} IS NULL THEN NULL WHEN {valid} THEN {era} * 146097 + {doe} - 719468"
            f" ELSE {invalid} END")


def _payload(spec_kind: str, name: str, nullable: bool, spark_type: str) -> Column:
    from pyspark.sql import functions as F

    if spec_kind == "date":
        return F.expr(f"date_from_unix_date(CAST({_days(name, nullable)} AS INT))")
    if spec_kind in DATES:
        return F.expr(f"timestamp_micros(({_days(name, nullable)}) * 86400000000 "
                      f"+ `{name}__3`)")
    if spec_kind == "bool":
        return F.col(f"`{name}`") != 0
    return F.col(f"`{name}`").cast(spark_type)


def _row_key(table: TappedTable, empty_key: bool) -> Column:
    from pyspark.sql import functions as F

    texts = [F.col(f"`{c}`").cast("string") for c in table.shape.key.columns]
    text = texts[0] if len(texts) == 1 else F.concat_ws("|", *texts)
    if empty_key:  # changelog/keys.py row_key_text: never empty
        blank = F.length(F.regexp_replace(text, EMPTY_KEY, "")) == 0
        text = F.when(blank, F.concat(text, F.lit(EMPTY_KEY))).otherwise(text)
    return text


def chunk_frame(spark: SparkSession, work: JdbcRead, chunks: list[Chunk]) -> DataFrame:
    """The chunks' raw rows (``work.spec``'s columns), one partition per chunk."""
    from pyspark.sql import functions as F

    source, table, spec = work.source, work.table, work.spec
    url = (f"jdbc:mariadb://{source.host}:{source.port}/?allowMultiQueries=true"
           f"&tinyInt1isBit=false&yearIsDateType=false&{_tls(source)}")
    props = {"user": source.user, "password": source.secret(),
             "driver": "org.mariadb.jdbc.Driver", "fetchsize": str(FETCH_ROWS),
             "sessionInitStatement": INIT}
    read = spark.read.jdbc(url, _columns_sql(table), predicates=[predicate(table, c)
                                                                  for c in chunks],
                           properties=props)
    ref = ((F.regexp_extract("sluice__file", r"\.(\d+)$", 1).cast("bigint")
            .bitwiseOR(F.lit(work.generation << GENERATION_SHIFT)))
           * F.lit(1 << OFFSET_BITS) + F.col("sluice__pos").cast("bigint"))
    ref = F.when(F.col("sluice__file").isNull() | (F.col("sluice__file") == ""),
                 F.raise_error(F.lit(f"bootstrap of {table.shape.qualified}: the server "
                                     "reported no snapshot position"))).otherwise(ref)
    indices = F.array(*[F.lit(c.index) for c in chunks])
    part = F.spark_partition_id()
    specs = {s.name: s for s in table.shape.columns}
    event = F.expr(f"timestamp_micros({work.event_ms * 1000})")
    columns: dict[str, Column] = {}
    for name, kind in spec.schema.payload:
        column = specs.get(name)
        columns[name] = (F.lit(None).cast(kind) if column is None
                         else _payload(column.kind, name, column.nullable, kind))
    columns.update({
        "_row_key": _row_key(table, spec.schema.empty_key),
        "_ref_key": ref,
        "_changed_columns": F.lit(None).cast("array<string>"),
        "_source": F.lit(f"{source.kind}-bootstrap"),
        "_event_ts": event,
        "_is_deleted": F.lit(False),
        "_force_update": F.lit(False),
        "_data_center": F.lit(source.data_center),
        "_kafka_partition": F.element_at(indices, part + 1),
        "_kafka_offset": F.monotonically_increasing_id() - F.shiftleft(part.cast("bigint"), 33),
        "_kafka_timestamp": event,
        "_batch_id": F.lit(spec.batch_id),
        "_ingested_at": F.expr(f"timestamp_micros({spec.ingested_at_us})"),
        "_replay_of": F.lit(None).cast("string"),
    })
    return read.select(*[columns[n].cast(t).alias(n) for n, t in spec.output_columns()])
