"""The binlog tap's fast path (sources/binlog/fastpath.py) publishes what the general path does.

The same stretch of binlog, with every type of the fidelity test's tables (edge values, NULLs,
zero dates, -0.0, every charset, ENUM/SET, BIT, DECIMAL) and the key kinds the fast path
takes, is tapped twice: once with the fast path switched off (the reference), once with it.
Every topic must hold the same messages, byte for byte, key for key, in the same order; and
the fast path must have taken the events of every table it can read (else the test proves
nothing).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.sources.binlog.support import TapEnv
from tests.sources.binlog.test_fidelity import (
    INTS,
    KEYS,
    TIMES,
    WORK,
    _insert_texts,
    _random_floats,
)

pytestmark = [pytest.mark.reliability, pytest.mark.e2e]  # a broker and a MariaDB

NUMS = """CREATE TABLE nums (
  id INT NOT NULL PRIMARY KEY, d38 DECIMAL(38,10), d52 DECIMAL(5,2),
  d10 DECIMAL(10,0) UNSIGNED, d0 DECIMAL(30,30), d19 DECIMAL(19,9), f FLOAT, d DOUBLE)"""
# the fidelity test's times, keyed by an INT (its DATE key takes the general path)
TIMES_BY_ID = TIMES.replace("CREATE TABLE times (", "CREATE TABLE times_id (id INT NOT NULL "
                            "AUTO_INCREMENT, ").replace("PRIMARY KEY (d, n)", "PRIMARY KEY (id)")
KEYED = (
    "CREATE TABLE dkey (k DECIMAL(12,3) NOT NULL PRIMARY KEY, v VARCHAR(5))",
    "CREATE TABLE skey (k VARCHAR(20) CHARACTER SET utf8mb4 NOT NULL PRIMARY KEY, n BIGINT)",
    "CREATE TABLE ckey (a INT NOT NULL, b SMALLINT NOT NULL, v VARCHAR(5), PRIMARY KEY (b, a))",
)
FAST = ("ints", "nums", "times_id", "texts", "dkey", "skey", "ckey")
GENERAL = ("times", "bytes_like", "uniq")  # a DATE key; keys in sluice_row_id


def _workload(env: TapEnv, charsets: dict[str, str]) -> None:
    for table in ("ints", "times", "uniq"):
        env.sql(*WORK[table]["insert"])
    env.sql("INSERT INTO times_id (d, n, dn, dt0, dt3, dt6, ts0, ts3, ts6, t0, t1, t3, t6) "
            "SELECT d, n, dn, dt0, dt3, dt6, ts0, ts3, ts6, t0, t1, t3, t6 FROM times",
            "INSERT INTO nums VALUES (1, 9999999999999999999999999999.9999999999, 999.99, "
            "9999999999, 0.999999999999999999999999999999, 1234567890.123456789, "
            "3.4028234e38, 1.7976931348623157e308), (2, "
            "-9999999999999999999999999999.9999999999, -999.99, 0, "
            "-0.000000000000000000000000000001, -0.000000001, -1.17549435e-38, 4.9e-324), "
            "(3, 0, 0, 0, 0, 0, -0.0, -0.0), (4, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
            "INSERT INTO dkey VALUES (0, 'z'), (-1.5, 'm'), (123456789.001, NULL), (-0.001, 'a')",
            "INSERT INTO skey VALUES ('', 1), ('\u2205', 2), ('a|b', 3), ('日本 🚀', -4), "
            "('x', NULL)")
    _insert_texts(env, charsets)
    floats = _random_floats(random.Random(7), 300)
    with env.server.root(env.database) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO nums (id, f, d) VALUES (%s, %s, %s)",
                        [(10 + i, f, d) for i, (f, d) in enumerate(floats)])
    env.sql(*WORK["ints"]["update"], *WORK["times"]["update"], *WORK["texts"]["update"],
            *WORK["uniq"]["update"],
            "SET SESSION sql_mode = CONCAT(@@sql_mode, ',ALLOW_INVALID_DATES')",
            "UPDATE times_id SET t6 = SEC_TO_TIME(-TIME_TO_SEC(t6)), "
            "dt6 = IF(dt6 = '0000-00-00 00:00:00', '2000-01-01 00:00:00.000001', "
            "'0000-00-00 00:00:00'), dn = IF(dn IS NULL, '0000-00-00', NULL)",
            # -0.0 and 0.0 are equal values: that update publishes nothing on either path
            "UPDATE nums SET d38 = -d38, d52 = -d52, d0 = -d0, d19 = -d19, f = -f, d = -d",
            "UPDATE nums SET d10 = 9999999999 - d10 WHERE id < 5",
            "UPDATE dkey SET k = -k WHERE v IS NOT NULL",  # key changes: delete + insert
            "UPDATE skey SET n = COALESCE(n, 0) + 1",
            "UPDATE skey SET k = CONCAT(k, '!') WHERE n = 4",
            "INSERT INTO ckey VALUES (1, 1, 'a'), (1, 2, NULL), (-2, 300, 'b')",
            "UPDATE ckey SET v = 'c' WHERE a = 1", "UPDATE ckey SET b = 3 WHERE b = 2",
            "DELETE FROM ckey WHERE a = -2",
            "INSERT INTO bytes_like VALUES (x'00', 1), (x'01', NULL)",
            "UPDATE bytes_like SET v = 5")
    env.sql(*WORK["ints"]["delete"], *WORK["times"]["delete"], *WORK["texts"]["delete"],
            *WORK["uniq"]["delete"], "DELETE FROM nums WHERE id IN (2, 11, 12)",
            "DELETE FROM times_id WHERE id = 2", "DELETE FROM dkey WHERE k = 0",
            "DELETE FROM skey WHERE n = 2")


def _tap(env: TapEnv, prefix: str, start: Any) -> None:
    from python_ingest.sources.binlog.position import BinlogCheckpoint, BinlogCheckpointStore
    from python_ingest.sources.binlog.tap import Tap

    env.write_config(topic_prefix=prefix)
    settings = env.settings()
    BinlogCheckpointStore(settings.path(settings.state_dir), env.source).save(
        BinlogCheckpoint(start))
    Tap(settings, settings.source(env.source)).run(until_end=True)


def _messages(env: TapEnv, prefix: str, table: str) -> list[tuple[Any, Any, Any]]:
    from python_ingest.kafka import client as kafka_client

    topic = f"{prefix}.{table}" if table == "__tap_errors" else \
        f"{prefix}.{env.database}.{table}"
    out = []
    for po in kafka_client.partition_offsets(env.bootstrap, topic):
        for m in kafka_client.read_range("confluent-kafka", env.bootstrap, topic, po.partition,
                                         po.earliest, po.end, timeout_s=30):
            out.append((po.partition, m.key, m.value))
    return out


def test_fast_path_publishes_the_general_paths_bytes(tap_env: TapEnv,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from python_ingest.sources.binlog import fastpath, tap
    from python_ingest.sources.binlog.position import BinlogPosition

    env = tap_env
    charsets = {"latin1": "Zoë ÿ", "sjis": "日本", "gbk": "中文", "koi8r": "Жы", "ucs2": "Ω€",
                "utf16le": "🚀a"}
    cols = ", ".join(f"c_{cs} VARCHAR(16) CHARACTER SET {cs}" for cs in charsets)
    texts = ["CREATE TABLE texts (id INT NOT NULL PRIMARY KEY, "  # the fidelity test's, fewer
             "l1 VARCHAR(20) CHARACTER SET latin1, c5 CHAR(5) CHARACTER SET utf8mb4, "
             "tx TEXT CHARACTER SET utf8mb4, "
             "e ENUM('médium','x y','ü''q','a\\\\b') CHARACTER SET latin1, "
             "e2 ENUM('small','médium','日本') CHARACTER SET utf8mb4 NOT NULL, "
             "st SET('a','é','日') CHARACTER SET utf8mb4, j JSON, " + cols + ")"]
    env.sql(INTS, NUMS, TIMES, TIMES_BY_ID, *KEYS[:1], *KEYED, *texts,
            "CREATE TABLE bytes_like (k VARBINARY(4) NOT NULL PRIMARY KEY, v INT)")
    start = BinlogPosition(*env.master())
    _workload(env, charsets)

    real = fastpath.publish
    monkeypatch.setattr(tap.fastpath, "publish", lambda *args: False)
    _tap(env, "general", start)
    taken: dict[str, list[bool]] = {}

    def counted(tap_: Any, table: Any, *args: Any) -> bool:
        done = real(tap_, table, *args)
        taken.setdefault(table.shape.table, []).append(done)
        return done

    monkeypatch.setattr(tap.fastpath, "publish", counted)
    _tap(env, "fast", start)

    assert all(all(taken[t]) for t in FAST), taken  # every event of theirs
    assert not any(any(taken[t]) for t in GENERAL), taken
    for table in (*FAST, *GENERAL):
        general = _messages(env, "general", table)
        assert general, table
        assert _messages(env, "fast", table) == general, table
    assert _messages(env, "fast", "__tap_errors") == _messages(env, "general", "__tap_errors")
