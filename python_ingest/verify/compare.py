"""`sluice verify`: is a lake table equal to its source table? Checked where the rows live.

The method (docs/verify.md), in the spirit of data-diff and pt-table-checksum:

1. Ranges. Every row falls in one of N ranges of the hash space of its key: CRC32 of the key's
   canonical text mod N (the same function on both sides; MD5's first 32 bits against
   PostgreSQL, which has no CRC32: ``Target.hash``). Hash ranges work for every
   key type (composite, text, dates) and are even whatever the key distribution.
2. Each side computes, per range and where its rows live, the row count and the sum and XOR
   of a hash of each row's canonical text (``verify.canonical``, ``verify.canonical_pg``):
   one scan per side, a few
   numbers per range over the wire, nothing else. Equal tables end here.
3. Ranges that differ are split ``fanout`` ways (mod N * fanout, restricted to them) and
   compared again, until a range holds at most ``range_rows`` rows; only those rows are then
   fetched from both sides and compared column by column.
4. The source is read inside one consistent snapshot (its binlog position or LSN is
   reported). Keys
   that differ are re-checked while the lake's merged position moves, so lag of the pipeline is
   not reported as a difference: a key is reported only when it still differs once the lake
   stopped changing (or ``settle_s`` passed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from python_ingest.verify.canonical import Column, bucket_sql, hash_sql, row_text
from python_ingest.verify.canonical_pg import PgColumn

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

Sums = dict[int, tuple[int, int, int]]  # range -> (rows, sum of row hashes, xor of them)
Rows = dict[str, tuple[str | None, ...]]  # canonical key -> canonical column texts


@dataclass(frozen=True)
class Target:
    """A lake table and the source table it copies."""

    job: str
    lake_table: str
    source_table: str  # `db`.`table` (MariaDB/MySQL), "schema"."table" (PostgreSQL)
    key: tuple[str, ...]
    columns: tuple[Column, ...] | tuple[PgColumn, ...]  # the key columns first
    dialect: str = "mysql"  # the source's SQL: mysql or postgres
    hash: str = "crc32"  # the row and key hash both sides compute: crc32, md5 (postgres)

    def key_columns(self) -> tuple[Column | PgColumn, ...]:
        return self.columns[: len(self.key)]


@dataclass
class Difference:
    """One key whose row is not the same on both sides."""

    key: str
    kind: str  # missing (in the lake), extra (in the lake), differs
    columns: list[str] = field(default_factory=list)


@dataclass
class VerifyResult:
    """What one verify found."""

    job: str
    lake_table: str
    source_table: str
    source_rows: int = 0
    lake_rows: int = 0
    ranges_checked: int = 0
    ranges_differing: int = 0
    rows_moved: int = 0
    source_position: str | None = None
    position_kind: str = "binlog"  # what source_position is: binlog (file:pos) or LSN
    lake_position: int | None = None
    differences: list[Difference] = field(default_factory=list)
    settled_keys: int = 0  # differed first, then equal once the lake caught up
    seconds: float = 0.0

    @property
    def equal(self) -> bool:
        return not self.differences

    def as_dict(self) -> dict[str, Any]:
        return {"job": self.job, "lake_table": self.lake_table, "source_table":
                self.source_table, "equal": self.equal, "source_rows": self.source_rows,
                "lake_rows": self.lake_rows, "ranges_checked": self.ranges_checked,
                "ranges_differing": self.ranges_differing, "rows_moved": self.rows_moved,
                "source_position": self.source_position, "position_kind": self.position_kind,
                "lake_position": self.lake_position,
                "settled_keys": self.settled_keys, "seconds": round(self.seconds, 3),
                "differences": [d.__dict__ for d in self.differences]}


class SourceSide:
    """The source table, read inside one consistent snapshot of ``conn``."""

    def __init__(self, conn: Any, target: Target) -> None:
        self.conn = conn
        self.target = target
        dialect, self.dialect = target.dialect, target.dialect
        self.key_text = row_text([c.source_sql() for c in target.key_columns()], dialect)
        self.row_hash = hash_sql(row_text([c.source_sql() for c in target.columns], dialect),
                                 dialect, target.hash)

    def bucket(self, text: str, mod: int) -> str:
        return bucket_sql(text, mod, self.dialect, self.target.hash)

    def _where(self, within: tuple[int, Iterable[int]] | None) -> str:
        if within is None:
            return ""
        mod, ranges = within
        return f" WHERE {self.bucket(self.key_text, mod)} IN ({_ints(ranges)})"

    def sums(self, buckets: int, within: tuple[int, Iterable[int]] | None) -> Sums:
        sql = (f"SELECT b, COUNT(*), SUM(h), BIT_XOR(h) FROM (SELECT "
               f"{self.bucket(self.key_text, buckets)} AS b, {self.row_hash} AS h "
               f"FROM {self.target.source_table}{self._where(within)}) AS r GROUP BY b")
        with self.conn.cursor() as cur:
            cur.execute(sql)
            return {int(b): (int(n), int(s), int(x)) for b, n, s, x in cur.fetchall()}

    def rows(self, mod: int, ranges: Iterable[int]) -> Rows:
        texts = ", ".join(c.source_sql() for c in self.target.columns)
        sql = (f"SELECT {self.key_text}, {texts} FROM {self.target.source_table}"
               f"{self._where((mod, ranges))}")
        with self.conn.cursor() as cur:
            cur.execute(sql)
            return {str(r[0]): tuple(_text(v) for v in r[1:]) for r in cur.fetchall()}


class LakeSide:
    """The lake table, read with Spark SQL (deleted rows kept as tombstones excluded)."""

    def __init__(self, spark: SparkSession, target: Target) -> None:
        self.spark = spark
        self.target = target
        self.key_text = row_text([c.lake_sql() for c in target.key_columns()], "spark")
        self.row_hash = hash_sql(row_text([c.lake_sql() for c in target.columns], "spark"),
                                 "spark", target.hash)
        names = {f.name for f in spark.table(target.lake_table).schema.fields}
        self.live = " where not coalesce(_is_deleted, false)" if "_is_deleted" in names else ""

    def _where(self, within: tuple[int, Iterable[int]] | None) -> str:
        if within is None:
            return self.live
        mod, ranges = within
        condition = f"{bucket_sql(self.key_text, mod, 'spark', self.target.hash)} in " \
                    f"({_ints(ranges)})"
        return f"{self.live} and {condition}" if self.live else f" where {condition}"

    def sums(self, buckets: int, within: tuple[int, Iterable[int]] | None) -> Sums:
        rows = self.spark.sql(
            f"select b, count(*), sum(h), bit_xor(h) from (select "
            f"{bucket_sql(self.key_text, buckets, 'spark', self.target.hash)} as b, "
            f"{self.row_hash} as h "
            f"from {self.target.lake_table}{self._where(within)}) group by b").collect()
        return {int(r[0]): (int(r[1]), int(r[2]), int(r[3])) for r in rows}

    def rows(self, mod: int, ranges: Iterable[int]) -> Rows:
        texts = ", ".join(c.lake_sql() for c in self.target.columns)
        found = self.spark.sql(f"select {self.key_text}, {texts} from {self.target.lake_table}"
                               f"{self._where((mod, ranges))}").collect()
        return {str(r[0]): tuple(_text(v) for v in list(r)[1:]) for r in found}

    def position(self) -> int | None:
        """The newest ref key the lake has merged (how far the pipeline has come)."""
        value = self.spark.sql(f"select max(_ref_key) from {self.target.lake_table}"
                               ).collect()[0][0]
        return int(value) if value is not None else None


def _ints(values: Iterable[int]) -> str:
    return ", ".join(str(int(v)) for v in sorted(set(values)))


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes | bytearray) else str(value)


def differing(source: Sums, lake: Sums) -> list[int]:
    """The ranges whose count or hash sum differ (a range missing on one side differs)."""
    return sorted(b for b in set(source) | set(lake) if source.get(b) != lake.get(b))


def initial_ranges(rows: int, range_rows: int, fanout: int) -> int:
    """How many ranges the first pass uses: about ``range_rows * fanout`` rows each."""
    return max(1, min(1 << 16, -(-rows // max(1, range_rows * fanout))))


def diff_rows(source: Rows, lake: Rows, names: tuple[str, ...]) -> list[Difference]:
    """Row-by-row comparison of the rows of the differing ranges."""
    out = []
    for key in sorted(set(source) | set(lake)):
        if key not in lake:
            out.append(Difference(key, "missing"))
        elif key not in source:
            out.append(Difference(key, "extra"))
        elif source[key] != lake[key]:
            changed = [n for n, a, b in zip(names, source[key], lake[key], strict=True) if a != b]
            out.append(Difference(key, "differs", changed))
    return out


def both(source: SourceSide, lake: LakeSide, buckets: int,
         within: tuple[int, Iterable[int]] | None) -> tuple[Sums, Sums]:
    """The range sums of both sides, computed at the same time (two servers, two scans)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        source_sums = pool.submit(source.sums, buckets, within)
        lake_sums = lake.sums(buckets, within)
        return source_sums.result(), lake_sums


def bisect(source: SourceSide, lake: LakeSide, result: VerifyResult, estimated_rows: int,
           range_rows: int, fanout: int,
           progress: Callable[[str], None]) -> tuple[int, list[int]]:
    """Narrow the differing ranges down to ranges of at most ``range_rows`` rows.

    Returns (modulus, ranges) of the small differing ranges whose rows must be compared.
    """
    mod = initial_ranges(estimated_rows, range_rows, fanout)
    src, lk = both(source, lake, mod, None)
    result.source_rows = sum(n for n, _, _ in src.values())
    result.lake_rows = sum(n for n, _, _ in lk.values())
    result.ranges_checked += len(set(src) | set(lk))
    bad = differing(src, lk)
    progress(f"{len(set(src) | set(lk))} ranges compared, {len(bad)} differ")
    while bad:
        result.ranges_differing += len(bad)
        biggest = max(max(src.get(b, (0, 0, 0))[0], lk.get(b, (0, 0, 0))[0]) for b in bad)
        if biggest <= range_rows or mod * fanout > 1 << 40:
            return mod, bad
        parent, mod = mod, mod * fanout
        children = [b + parent * i for b in bad for i in range(fanout)]
        src, lk = both(source, lake, mod, (parent, bad))
        result.ranges_checked += len(set(src) | set(lk))
        bad = [b for b in differing(src, lk) if b in set(children)]
        progress(f"split into {mod} ranges: {len(bad)} differ")
    return mod, []


def key_first(job: Any, columns: dict[str, Any], source: str, lake_table: str) -> list[Any]:
    """``columns`` (by name) with the job's row key first, in its order; an error naming the
    key columns that are not in both ``source`` and ``lake_table``."""
    from python_ingest.exceptions import SluiceError

    missing = [k for k in job.row_key if k not in columns]
    if missing:
        raise SluiceError(f"key column(s) {', '.join(missing)} of job {job.name} are not in both "
                          f"{source} and {lake_table}")
    return [columns[k] for k in job.row_key] + [c for n, c in columns.items()
                                                if n not in job.row_key]
