"""Every value as the source holds it, through scaffold, tap and pipeline (docs/types.md).

One table per class of types (integers and BIT, numbers, bytes, text in every charset the
server offers, ENUM/SET/JSON, dates and times with zero dates, spatial and MariaDB's UUID/INET
types) and per kind of key (a UNIQUE NOT NULL index, ``key_columns``, a full-row identity with
duplicate rows, one bootstrapped, an append-only changelog). Each gets edge values (limits,
NULLs, zero dates, empty strings and bytes, non-ASCII, negative and fractional times), then an
update of every row and a delete. The scaffold (the real CLI) picks the keys, the tap publishes,
a pipeline run merges; each lake table must equal its MariaDB table value by value, compared
in a canonical text form computed independently on each side (tests/sources/binlog/canon.py).
Then each type table is bootstrapped over its lake table (its SELECT path must give the same
values) and must still be equal after a second run.
"""

from __future__ import annotations

import random
import struct
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import sluice_cmd
from tests.sources.binlog import canon
from tests.sources.binlog.lake import make_project, run_pipeline
from tests.sources.binlog.support import TapEnv

INTS = """CREATE TABLE ints (
  id INT NOT NULL PRIMARY KEY, t TINYINT, tu TINYINT UNSIGNED, s SMALLINT, su SMALLINT UNSIGNED,
  m MEDIUMINT, mu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, b BIGINT, bu BIGINT UNSIGNED,
  y YEAR, flag BOOL, b1 BIT(1), b5 BIT(5), b63 BIT(63), b64 BIT(64) NOT NULL DEFAULT 0)"""
NUMS = """CREATE TABLE nums (
  id INT NOT NULL PRIMARY KEY, d65 DECIMAL(65,30), d38 DECIMAL(38,10), d52 DECIMAL(5,2),
  d10 DECIMAL(10,0) UNSIGNED, d0 DECIMAL(30,30), f FLOAT, d DOUBLE)"""
BYTES = """CREATE TABLE bytes (
  id BINARY(16) NOT NULL PRIMARY KEY, b4 BINARY(4), b1 BINARY(1) NOT NULL, vb VARBINARY(20),
  bl BLOB, lb LONGBLOB)"""
TIMES = """CREATE TABLE times (
  d DATE NOT NULL, n INT NOT NULL, dn DATE NULL, dt0 DATETIME NOT NULL, dt3 DATETIME(3) NULL,
  dt6 DATETIME(6) NOT NULL, ts0 TIMESTAMP NOT NULL, ts3 TIMESTAMP(3) NULL,
  ts6 TIMESTAMP(6) NOT NULL, t0 TIME, t1 TIME(1), t3 TIME(3), t6 TIME(6) NOT NULL,
  PRIMARY KEY (d, n))"""
SPATIAL = """CREATE TABLE geo (
  id INT NOT NULL PRIMARY KEY, g GEOMETRY, p POINT NOT NULL, ls LINESTRING, pg POLYGON,
  mp MULTIPOINT, gc GEOMETRYCOLLECTION, u UUID, i4 INET4, i6 INET6)"""
KEYS = (
    "CREATE TABLE uniq (code VARCHAR(10) NOT NULL, region CHAR(2) NOT NULL, v INT, "
    "other VARCHAR(5) NULL, UNIQUE KEY uq_other (other), UNIQUE KEY uq_code (code, region), "
    "KEY by_v (v))",
    "CREATE TABLE kc (a INT NOT NULL, b VARCHAR(10) NOT NULL, v INT)",
    "CREATE TABLE nokey (a INT NULL, b VARCHAR(10) NULL, c DATE NULL, f FLOAT NULL)",
    "CREATE TABLE nokey_boot (a INT NULL, b VARCHAR(10) NULL)",
    "CREATE TABLE cl (a INT NULL, v VARCHAR(10) NULL)",
)
# Text candidates: each charset column gets those the charset can hold (asked of the server).
POOL = ("A", "z", "0", " ", "~", "é", "ß", "ÿ", "€", "Ł", "Č", "ğ", "ą", "Ω", "Ж", "ї", "ש",
        "م", "ไ", "Հ", "ქ", "中", "文", "日", "本", "語", "한", "Ä", "Å", "ñ", "☃", "🚀")
INSERT_TEXTS = 5


def _charset_columns(env: TapEnv) -> dict[str, str]:
    """A column per charset the server offers (but binary) -> a text it can hold."""
    charsets = [r[0] for r in env.sql("SHOW CHARACTER SET") if r[0] != "binary"]
    out = {}
    for cs in sorted(charsets):
        kept = []
        for ch in POOL:
            (ok,), = env.sql(f"SELECT CONVERT(CONVERT(%s USING {cs}) USING utf8mb4) = %s "
                             "COLLATE utf8mb4_bin", params=(ch, ch))
            if ok:
                kept.append(ch)
        out[cs] = "".join(kept[:12])
    return out


def _texts(env: TapEnv) -> tuple[list[str], dict[str, str]]:
    charsets = _charset_columns(env)
    cols = ", ".join(f"c_{cs} VARCHAR(16) CHARACTER SET {cs}" for cs in charsets)
    create = ("CREATE TABLE texts (id INT NOT NULL PRIMARY KEY, "
              "l1 VARCHAR(20) CHARACTER SET latin1, c5 CHAR(5) CHARACTER SET utf8mb4, "
              "tx TEXT CHARACTER SET utf8mb4, "
              "e ENUM('médium','x y','ü''q','a\\\\b') CHARACTER SET latin1, "
              "e2 ENUM('small','médium','日本') CHARACTER SET utf8mb4 NOT NULL, "
              "st SET('a','é','日') CHARACTER SET utf8mb4, j JSON, " + cols + ")")
    return [create], charsets


def _insert_texts(env: TapEnv, charsets: dict[str, str]) -> None:
    names = ", ".join(f"c_{cs}" for cs in charsets)
    marks = ", ".join(["%s"] * len(charsets))
    rows = [
        (1, "Zoë café", "ab", "São Paulo 日本 🚀\nline", "médium", "médium", "a,é,日",
         '{"k": [1, "é", null], "n": 1.5e300}', *charsets.values()),
        (2, "", "", "", "x y", "small", "", '""', *([""] * len(charsets))),
        (3, None, None, None, None, "日本", None, None, *([None] * len(charsets))),
        (4, "trailing  ", "a b", "  lead", "ü'q", "small", "日", "[]",
         *[t[::-1] for t in charsets.values()]),
        (5, "a\\b 'q'", "  x", "x" * 3000, "a\\b", "small", "a", '{"a":1,"b" : [ ]}',
         *[t[:1] for t in charsets.values()]),
    ]
    with env.server.root(env.database) as conn, conn.cursor() as cur:
        for row in rows:
            cur.execute(f"INSERT INTO texts (id, l1, c5, tx, e, e2, st, j, {names}) VALUES "
                        f"(%s, %s, %s, %s, %s, %s, %s, %s, {marks})", row)
        # latin1 bytes Python's cp1252 cannot decode (0x81), and ENUM's index 0 ('', an
        # invalid value kept by a non-strict server)
        cur.execute("INSERT INTO texts (id, l1, e2) VALUES (6, CAST(x'e981ff80' AS CHAR "
                    "CHARACTER SET latin1), 'small')")
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute("INSERT INTO texts (id, e, e2) VALUES (7, 'not a member', 'small')")


def _random_floats(rng: random.Random, n: int) -> list[tuple[float, float]]:
    out = []
    while len(out) < n:
        d = struct.unpack("<d", rng.randbytes(8))[0]
        f = struct.unpack("<f", rng.randbytes(4))[0]
        if d == d and f == f and abs(d) != float("inf") and abs(f) != float("inf"):
            out.append((f, d))
    return out


WORK: dict[str, dict[str, list[str]]] = {
    "ints": {
        "insert": [
            "INSERT INTO ints VALUES (1, -128, 0, -32768, 0, -8388608, 0, -2147483648, 0, "
            "-9223372036854775808, 0, 0, 0, b'0', b'0', 0, 0)",
            "INSERT INTO ints VALUES (2, 127, 255, 32767, 65535, 8388607, 16777215, 2147483647, "
            "4294967295, 9223372036854775807, 18446744073709551615, 2155, 1, b'1', b'11111', "
            "0x7FFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFF)",
            "INSERT INTO ints (id, b64) VALUES (3, 0x8000000000000000)",
            "INSERT INTO ints VALUES (4, -1, 1, -1, 1, -1, 1, -1, 1, -1, 9223372036854775808, "
            "1901, 0, b'1', b'10101', 1, 1)",
        ],
        "update": ["UPDATE ints SET t = -(t + 1), s = -(s + 1), m = -(m + 1), i = -(i + 1), "
                   "b = IF(b < 0, -(b + 1), -b - 1), bu = 18446744073709551615 - bu, "
                   "b64 = ~b64, b1 = b1 ^ 1, b5 = b5 ^ 31, y = IF(y = 2155, 1901, 2155)"],
        "delete": ["DELETE FROM ints WHERE id = 4"],
    },
    "nums": {
        "insert": [
            "INSERT INTO nums VALUES (1, "
            "99999999999999999999999999999999999.999999999999999999999999999999, "
            "9999999999999999999999999999.9999999999, 999.99, 9999999999, "
            "0.999999999999999999999999999999, 3.4028234e38, 1.7976931348623157e308)",
            "INSERT INTO nums VALUES (2, "
            "-99999999999999999999999999999999999.999999999999999999999999999999, "
            "-9999999999999999999999999999.9999999999, -999.99, 0, "
            "-0.000000000000000000000000000001, -1.17549435e-38, 4.9e-324)",
            "INSERT INTO nums VALUES (3, 0, 0, 0, 0, 0, -0.0, -0.0)",
            "INSERT INTO nums (id) VALUES (4)",
        ],
        "update": ["UPDATE nums SET d65 = -d65, d38 = -d38, d52 = -d52, d10 = 9999999999 - d10, "
                   "d0 = -d0, f = -f, d = -d"],
        "delete": ["DELETE FROM nums WHERE id = 2"],
    },
    "bytes": {
        "insert": [
            "INSERT INTO bytes VALUES (x'ab000000000000000000000000000000', x'01020300', x'00', "
            "x'', x'', NULL)",
            "INSERT INTO bytes VALUES (x'00000000000000000000000000000000', x'00000000', "
            "x'ff', x'00', x'0000', x'00')",
            "INSERT INTO bytes VALUES (x'6ccd780cbaba102695645b8c656024db', x'ffffffff', "
            "x'20', x'0000', NULL, REPEAT(x'00ff', 50000))",
            "INSERT INTO bytes VALUES (x'0102030405060708090a0b0c0d0e0f00', NULL, x'41', NULL, "
            "x'000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20', x'')",
        ],
        "update": ["UPDATE bytes SET vb = CONCAT(COALESCE(vb, x''), x'00'), "
                   "b4 = IFNULL(REVERSE(b4), x'00000001'), b1 = x'00'",
                   "UPDATE bytes SET id = x'ab000000000000000000000000000001' "
                   "WHERE id = x'ab000000000000000000000000000000'"],
        "delete": ["DELETE FROM bytes WHERE id = x'0102030405060708090a0b0c0d0e0f00'"],
    },
    "times": {
        "insert": [
            "SET SESSION sql_mode = CONCAT(@@sql_mode, ',ALLOW_INVALID_DATES')",
            "INSERT INTO times VALUES ('0000-00-00', 1, '0000-00-00', '0000-00-00 00:00:00', "
            "'0000-00-00 00:00:00.000', '0000-00-00 00:00:00', 0, 0, 0, '-838:59:59', "
            "'-00:00:00.5', '-733:00:00.001', '-01:02:03.456789')",
            "INSERT INTO times VALUES ('1970-01-01', 1, '1970-01-01', '1970-01-01 00:00:00', "
            "'1970-01-01 00:00:00.001', '1970-01-01 00:00:00.000001', '1970-01-01 00:00:01', "
            "'1970-01-01 00:00:01.999', '1970-01-01 00:00:01.000001', '838:59:59', '24:00:00.1',"
            " '100:00:00.999', '-838:59:59.000000')",
            "INSERT INTO times VALUES ('2020-00-15', 1, '2020-05-00', '2020-00-00 10:11:12', "
            "'2020-00-15 10:11:12.5', '2020-05-00 23:59:59.999999', "
            "'2038-01-19 03:14:07', NULL, '2038-01-19 03:14:07.999999', NULL, NULL, NULL, "
            "'00:00:00')",
            "INSERT INTO times VALUES ('2020-05-00', 1, NULL, '1000-01-01 00:00:00', NULL, "
            "'9999-12-31 23:59:59.999999', '2000-02-29 12:00:00', '2000-02-29 12:00:00.5', "
            "'1999-12-31 23:59:59.999999', '-00:00:01', '-12:34:56.7', '00:00:00.001', "
            "'838:59:59.999999')",
            "INSERT INTO times VALUES ('2021-02-30', 1, '2021-02-30', '2021-02-30 00:00:00', "
            "'2021-04-31 01:02:03.004', '1000-01-01 00:00:00', '2021-03-01 00:00:00', NULL, "
            "'2021-03-01 00:00:00.5', '00:00:00', '00:00:00.0', '-00:00:00.001', "
            "'-00:00:00.000001')",
            "INSERT INTO times VALUES ('9999-12-31', 2, '1000-01-01', '9999-12-31 23:59:59', "
            "'9999-12-31 23:59:59.999', '0000-00-00 00:00:00', '2024-02-29 23:59:59', "
            "'2024-02-29 23:59:59.999', '2024-02-29 23:59:59.999999', '12:00:00', '-1:00:00.9',"
            " '-838:59:59.000', '1:02:03')",
        ],
        "update": [
            "SET SESSION sql_mode = CONCAT(@@sql_mode, ',ALLOW_INVALID_DATES')",
            "UPDATE times SET t6 = SEC_TO_TIME(-TIME_TO_SEC(t6)), "
            "dt6 = IF(dt6 = '0000-00-00 00:00:00', '2000-01-01 00:00:00.000001', "
            "'0000-00-00 00:00:00'), dn = IF(dn IS NULL, '0000-00-00', NULL), "
            "ts3 = IF(ts3 IS NULL, '2001-02-03 04:05:06.789', NULL)",
            "UPDATE times SET n = 3 WHERE d = '2020-00-15'",
        ],
        "delete": ["DELETE FROM times WHERE d = '2020-05-00'"],
    },
    "geo": {
        "insert": [
            "INSERT INTO geo VALUES (1, ST_GeomFromText('POINT(1 2)', 4326), "
            "ST_GeomFromText('POINT(-1.5 1e300)'), ST_GeomFromText('LINESTRING(0 0, 1 1, 2 0)'), "
            "ST_GeomFromText('POLYGON((0 0, 4 0, 4 4, 0 4, 0 0), (1 1, 2 1, 2 2, 1 1))'), "
            "ST_GeomFromText('MULTIPOINT(0 0, 1 1)'), "
            "ST_GeomFromText('GEOMETRYCOLLECTION(POINT(1 1), LINESTRING(0 0, 1 1))'), "
            "'6ccd780c-baba-1026-9564-5b8c656024db', '0.0.0.0', '::ffff:1.2.3.4')",
            "INSERT INTO geo VALUES (2, ST_GeomFromText('POLYGON((0 0, 1 0, 0 1, 0 0))'), "
            "ST_GeomFromText('POINT(0 0)'), NULL, NULL, NULL, NULL, "
            "'12345678-0000-0000-0000-000000000000', '255.255.255.255', '1::')",
            "INSERT INTO geo VALUES (3, NULL, ST_GeomFromText('POINT(3 4)'), NULL, NULL, "
            "NULL, ST_GeomFromText('GEOMETRYCOLLECTION EMPTY'), "
            "'00000000-0000-0000-0000-000000000000', '10.0.0.0', '::')",
            "INSERT INTO geo VALUES (4, NULL, ST_GeomFromText('POINT(5 6)'), NULL, NULL, "
            "NULL, NULL, 'ffffffff-ffff-ffff-ffff-ffffffffffff', NULL, '1:0:2:3:4:5:6:7')",
            "INSERT INTO geo VALUES (5, NULL, ST_GeomFromText('POINT(7 8)'), NULL, NULL, "
            "NULL, NULL, NULL, '1.2.3.4', '::1.2.3.4')",
        ],
        "update": ["UPDATE geo SET p = ST_GeomFromText(CONCAT('POINT(', ST_Y(p), ' ', "
                   "ST_X(p), ')')), i6 = IF(i6 IS NULL, 'fe80::1:0:0:0', NULL), "
                   "u = IF(u IS NULL, '00000000-0000-0000-0000-000000000001', u)"],
        "delete": ["DELETE FROM geo WHERE id = 4"],
    },
    "texts": {
        "insert": [],  # _insert_texts
        "update": ["UPDATE texts SET l1 = CONCAT(COALESCE(l1, ''), 'ß'), c5 = REVERSE(c5), "
                   "e2 = IF(e2 = 'small', '日本', 'small'), "
                   "st = IF(st = '', 'a,日', ''), j = IF(j IS NULL, '{}', NULL)"],
        "delete": ["DELETE FROM texts WHERE id = 5"],
    },
    "uniq": {
        "insert": ["INSERT INTO uniq VALUES ('a', 'eu', 1, NULL), ('a', 'us', 2, NULL), "
                   "('b', 'eu', NULL, 'x'), ('日本', 'jp', 4, 'y')"],
        "update": ["UPDATE uniq SET v = COALESCE(v, 0) + 10",
                   "UPDATE uniq SET code = 'zz' WHERE code = 'a' AND region = 'eu'"],
        "delete": ["DELETE FROM uniq WHERE code = 'b'"],
    },
    "kc": {
        "insert": ["INSERT INTO kc VALUES (1, 'x', 1), (1, 'y', 2), (2, 'x', NULL), (3, 'é', 4)"],
        "update": ["UPDATE kc SET v = COALESCE(v, 0) * 2 + 1"],
        "delete": ["DELETE FROM kc WHERE a = 3"],
    },
    "nokey": {
        "insert": ["INSERT INTO nokey VALUES (1, 'x', NULL, 1.5), (1, 'x', NULL, 1.5), "
                   "(1, 'x', NULL, 1.5), (2, NULL, NULL, NULL), (2, NULL, NULL, NULL), "
                   "(NULL, NULL, NULL, NULL), (NULL, NULL, NULL, NULL), "
                   "(3, 'y', '2020-01-01', -0.0)"],
        "update": ["UPDATE nokey SET a = COALESCE(a, 0) + 10"],
        "delete": ["DELETE FROM nokey WHERE a = 11 LIMIT 1",
                   "DELETE FROM nokey WHERE a = 10 LIMIT 1"],
    },
    "nokey_boot": {
        "insert": ["INSERT INTO nokey_boot VALUES (1, 'before'), (5, 'new')"],
        "update": ["UPDATE nokey_boot SET b = CONCAT(COALESCE(b, ''), '+')"],
        "delete": ["DELETE FROM nokey_boot WHERE a = 1 LIMIT 1"],
    },
    "cl": {
        "insert": ["INSERT INTO cl VALUES (1, 'a'), (1, 'a'), (2, NULL)"],
        "update": ["UPDATE cl SET v = CONCAT(COALESCE(v, ''), '!')"],
        "delete": ["DELETE FROM cl WHERE a = 2"],
    },
}
PREFILL = ["INSERT INTO nokey_boot VALUES (1, 'before'), (1, 'before'), (2, NULL), (2, NULL)"]
CLASSES = ("ints", "nums", "bytes", "texts", "times", "geo")
TABLES = (*CLASSES, "uniq", "kc", "nokey", "nokey_boot", "cl")


class Fidelity:
    """The shared run: tables, scaffold, tap, bootstrap, two pipeline runs."""

    def __init__(self, env: TapEnv, spark: Any) -> None:
        self.env = env
        self.spark = spark
        self.scaffold_out = ""
        self.config_text = ""
        self.first: list[Any] = []
        self.last: list[Any] = []
        self.booted: list[Any] = []
        self.after_tap: dict[str, str] = {}

    def jobs(self) -> dict[str, str]:
        return {t: next(n for n, j in self.env.jobs.items() if j["topic"] == self.env.topic(t))
                for t in TABLES}

    def run(self) -> None:
        env = self.env
        db = env.database
        env.write_config(key_columns={f"{db}.kc": ["a", "b"], f"{db}.cl": "changelog"})
        make_project(env.tmp)
        texts, charsets = _texts(env)
        env.sql(INTS, NUMS, BYTES, TIMES, SPATIAL, *KEYS, *texts)
        env.sql(*PREFILL)
        done = sluice_cmd(env.config, "tap", env.source, "--scaffold")
        assert done.returncode == 0, done.stdout + done.stderr
        self.scaffold_out = done.stdout
        self.config_text = env.config.read_text()
        env.jobs = yaml.safe_load(self.config_text)["jobs"]
        env.tap_until_end()
        from python_ingest.sources.binlog.bootstrap import bootstrap

        settings = env.settings()
        bootstrap(settings, settings.source(env.source), f"{db}.nokey_boot", workers=1,
                  progress=lambda line: None)
        for work in WORK.values():
            if work["insert"]:
                env.sql(*work["insert"])
        _insert_texts(env, charsets)
        floats = _random_floats(random.Random(5), 200)
        with env.server.root(db) as conn, conn.cursor() as cur:
            cur.executemany("INSERT INTO nums (id, f, d) VALUES (%s, %s, %s)",
                            [(10 + i, f, d) for i, (f, d) in enumerate(floats)])
        # inserts, updates and deletes reach the lake in one pipeline run (a run costs about
        # as much as the rest of this fixture): the tap publishes each change as its own event,
        # and the merge applies them in ref-key order, as it does across batches
        for work in WORK.values():
            env.sql(*work["update"])
        for work in WORK.values():
            env.sql(*work["delete"])
        env.tap_until_end()
        self.last = run_pipeline(self.spark, env)
        self.after_tap = {t: self.differences(t) for t in TABLES if t != "cl"}
        # the bootstrap's SELECT path must give the same values: snapshot every type table
        # again (its rows are newer than every change) and merge them over the lake rows
        for table in CLASSES:
            bootstrap(settings, settings.source(env.source), f"{db}.{table}", workers=1,
                      progress=lambda line: None)
        self.booted = run_pipeline(self.spark, env)

    def differences(self, table: str) -> str:
        """'' when the lake table equals the MariaDB table (canonical values, multisets)."""
        names = [c["COLUMN_NAME"] for c in canon.columns(self.env, table)]
        return canon.differences(canon.source_rows(self.env, table),
                                 canon.lake_rows(self.spark, f"lake.{self.jobs()[table]}",
                                                 names), names)


@pytest.fixture(scope="module")
def fidelity(tmp_path_factory: pytest.TempPathFactory, workdir: Path, broker: str,
             mariadb: Any, spark: Any) -> Any:
    tmp = tmp_path_factory.mktemp("fidelity")
    with mariadb.root() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE fidelity")
    env = TapEnv(tmp, workdir, broker, mariadb, "fidelity")
    run = Fidelity(env, spark)
    try:
        run.run()
    finally:
        env.close()
    return run


def _assert_equal(run: Fidelity, table: str) -> int:
    """The lake table equalled the source after the tap's changes, and equals it now."""
    env = run.env
    where = f"lake.{run.jobs()[table]} differs from {env.database}.{table}"
    assert not run.after_tap[table], f"{where} after the tap:\n{run.after_tap[table]}"
    problem = run.differences(table)
    assert not problem, f"{where} after a bootstrap over it:\n{problem}"
    return len(canon.source_rows(env, table))


@pytest.mark.e2e
@pytest.mark.parametrize("table", CLASSES)
def test_each_type_class_lands_equal_to_the_source(fidelity: Fidelity, table: str) -> None:
    assert _assert_equal(fidelity, table) >= 3
    _assert_no_errors(fidelity, table)


def _assert_no_errors(run: Fidelity, table: str) -> None:
    """No message failed to decode, no row failed its suite or the merge."""
    job = run.jobs()[table]
    for result in run.first + run.last + run.booted:
        if result.job == job:
            for count in ("decode_errors", "expectation_errors", "merge_errors"):
                assert result.counts.get(count, 0) == 0, (job, result.counts)


@pytest.mark.e2e
def test_the_documented_edge_values(fidelity: Fidelity) -> None:
    """A few values spelled out (the comparison above checks all of them)."""
    spark, jobs = fidelity.spark, fidelity.jobs()
    ints = {r["id"]: r for r in spark.table(f"lake.{jobs['ints']}").collect()}
    assert str(ints[3]["b64"]) == str(2**64 - 1 - 2**63)  # ~0x8000000000000000 after the update
    assert ints[2]["b1"] is False and ints[1]["b1"] is True
    b = spark.sql(f"select hex(id) k, hex(b4) b4 from lake.{jobs['bytes']}").collect()
    assert {r["k"]: r["b4"] for r in b}["AB000000000000000000000000000001"] == "00030201"
    t = spark.sql(f"select n, cast(d as string) d, unix_date(d) days, t6, t3 "
                  f"from lake.{jobs['times']}").collect()
    days = sorted(r["days"] for r in t)
    assert -719529 in days and 0 in days  # '0000-00-00' and '1970-01-01': two rows
    assert "733:00:00.001" in {r["t3"].lstrip("-") for r in t if r["t3"]}
    assert "-733:00:00.001" in {r["t3"] for r in t}
    texts = {r["id"]: r for r in spark.table(f"lake.{jobs['texts']}").collect()}
    assert texts[1]["e"] == "médium" and texts[7]["e"] == "" and texts[2]["st"] == "a,日"
    assert texts[6]["l1"] == "é\x81ÿ€ß"


@pytest.mark.e2e
def test_keys_are_chosen_and_said_by_the_scaffold(fidelity: Fidelity) -> None:
    out, jobs = fidelity.scaffold_out, fidelity.env.jobs
    db = fidelity.env.database
    assert f"{db}.uniq -> job {db}_uniq, row key unique index uq_code (code, region)" in out
    assert f"{db}.kc -> job {db}_kc, row key key_columns (a, b)" in out
    assert f"{db}.nokey -> job {db}_nokey, row key full-row identity" in out, out
    assert f"{db}.cl -> job {db}_cl, row key append-only changelog" in out
    assert "as sluice_row_id" in out.split(f"{db}.bytes")[1].splitlines()[0]
    assert jobs[f"{db}_times"]["row_key"] == ["d", "n"]
    for name in ("nokey", "cl", "bytes", "uniq", "kc"):  # text in a composite key (#9.7)
        assert jobs[f"{db}_{name}"]["row_key"] == ["sluice_row_id"]
    assert f"# {db}_nokey: row key full-row identity" in fidelity.config_text
    assert f"{fidelity.env.source}__tap_errors" in jobs


@pytest.mark.e2e
@pytest.mark.parametrize("table", ["uniq", "kc", "nokey", "nokey_boot"])
def test_tables_without_primary_key_land_equal(fidelity: Fidelity, table: str) -> None:
    """Unique index, key_columns, and full-row identities (duplicates stay, a delete removes
    one copy; one of them bootstrapped with duplicates before the tap ran)."""
    assert _assert_equal(fidelity, table) >= 2
    _assert_no_errors(fidelity, table)


@pytest.mark.e2e
def test_append_only_changelog_keeps_every_change(fidelity: Fidelity) -> None:
    spark, table = fidelity.spark, f"lake.{fidelity.jobs()['cl']}"
    rows = spark.sql(f"select sluice_op, cast(a as string) a, v from {table}").collect()
    got = Counter((r["sluice_op"], r["a"], r["v"]) for r in rows)
    assert got == Counter([("insert", "1", "a"), ("insert", "1", "a"), ("insert", "2", None),
                           ("update", "1", "a!"), ("update", "1", "a!"), ("update", "2", "!"),
                           ("delete", "2", "!")])
    _assert_no_errors(fidelity, "cl")
    errors = [r for r in fidelity.first + fidelity.last + fidelity.booted
              if r.job.endswith("__tap_errors")]
    assert errors and all(r.counts["read"] == 0 for r in errors)  # no value was left out
