"""The PostgreSQL tap's replication connection (issue #50): only the tap moves the slot's
flush position, the connection survives long work, and a streamed transaction's Relation
messages survive a rolled-back savepoint; a row change of an unknown relation is an error."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

pytestmark = pytest.mark.postgres_source


def _slot_confirmed(env: Any) -> int:
    from python_ingest.sources.postgres.position import parse_lsn

    return parse_lsn(env.sql("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                             f"WHERE slot_name = 'sluice_{env.source}'")[0][0])


def _checkpoint_lsn(env: Any) -> int:
    from python_ingest.sources.postgres.position import parse_lsn

    return parse_lsn(env.checkpoint()["lsn"])


class _Crash(Exception):
    """The tap 'killed' in the middle of a transaction."""


@pytest.mark.reliability
def test_the_slot_is_never_confirmed_past_an_unpublished_transaction(pg_env, monkeypatch) -> None:
    """T2 commits and is checkpointed while a long transaction T3 is open; then T1 commits
    (read, not checkpointed yet) and T3 commits: T3's changes start below T2's end, and the
    server's keepalives arrive while the tap reads T3 slowly. psycopg2 would confirm the
    server's WAL end on them (past T1); the tap dies in the middle of T3, and the restarted
    tap must still get T1 and T3 whole."""
    from python_ingest.sources.postgres.tap import PgTap

    env = pg_env
    env.sql("CREATE TABLE big (id int PRIMARY KEY, pad text)",
            "CREATE TABLE small (id int PRIMARY KEY)",
            f"ALTER DATABASE {env.database} SET wal_sender_timeout = '4s'")
    env.write_config(checkpoint_interval_s=5)  # T1 stays unsaved while T3 is read
    env.add_jobs()
    env.tap_until_end()  # the slot and the topics
    gate = threading.Event()
    seen = {"rows": 0, "confirmed": []}
    original = PgTap._message

    def slow(self: Any, payload: bytes) -> None:
        if gate.is_set() and payload[0] == ord("I"):
            seen["rows"] += 1
            if seen["rows"] == 1:
                time.sleep(3)  # the server's keepalive (reply wanted) queues behind T1's data
            if seen["rows"] % 1000 == 0:
                seen["confirmed"].append((_slot_confirmed(env), self._saved))
            if seen["rows"] == 8000:
                raise _Crash
        original(self, payload)

    monkeypatch.setattr(PgTap, "_message", slow)
    settings = env.settings()
    tap = PgTap(settings, settings.source(env.source))
    failure: list[BaseException] = []

    def run() -> None:
        try:
            tap.run()
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    with env.connect() as long_conn:
        long_conn.autocommit = False
        with long_conn.cursor() as cur:
            cur.execute("INSERT INTO big SELECT g, repeat(md5(g::text), 100) "
                        "FROM generate_series(1, 10000) g")
            before_t2 = env.current_lsn()
            env.sql("INSERT INTO small VALUES (1)")  # T2: commits while T3 is open
            deadline = time.monotonic() + 60
            while _checkpoint_lsn(env) <= before_t2 or _slot_confirmed(env) <= before_t2:
                assert time.monotonic() < deadline, "the tap did not checkpoint T2"
                time.sleep(0.1)
            env.sql("INSERT INTO small VALUES (2)")  # T1
            gate.set()
        long_conn.commit()  # T3
    thread.join(120)
    assert not thread.is_alive()
    assert failure and isinstance(failure[0], _Crash), failure
    checkpoint = _checkpoint_lsn(env)
    assert checkpoint < env.current_lsn()  # T1 and T3 are not checkpointed
    assert seen["confirmed"] and all(c <= saved for c, saved in seen["confirmed"]), seen
    assert _slot_confirmed(env) <= checkpoint
    monkeypatch.setattr(PgTap, "_message", original)
    again = env.tap_until_end()  # the restart: the server resends T1 and T3, whole
    assert again.stats.row_changes == 1 + 10000
    assert env.assert_equal("small") == 2  # T1 (psycopg2 confirmed past it: lost)


@pytest.mark.reliability
def test_a_long_truncate_keeps_the_replication_connection_alive(pg_env, monkeypatch) -> None:
    """Publishing a TRUNCATE's deletes reads the table's whole topic; with a short
    wal_sender_timeout the server would end the connection meanwhile (a crash loop)."""
    from python_ingest.sources.tap import truncation

    env = pg_env
    env.sql("CREATE TABLE items (id int PRIMARY KEY, v text)",
            f"ALTER DATABASE {env.database} SET wal_sender_timeout = '1s'")
    env.add_jobs()
    env.tap_until_end()
    env.sql("INSERT INTO items SELECT g, 'v' || g FROM generate_series(1, 3000) g")
    env.tap_until_end()
    original = truncation.truncate

    def slow_truncate(*args: Any, **kwargs: Any) -> Any:
        time.sleep(3)  # a large topic's worth of reading
        return original(*args, **kwargs)

    monkeypatch.setattr(truncation, "truncate", slow_truncate)
    env.sql("TRUNCATE items", "INSERT INTO items VALUES (1, 'after')")
    tap = env.tap_until_end()
    assert tap.stats.messages == 3000 + 1
    assert env.assert_equal("items") == 1


def test_a_relation_in_a_rolled_back_savepoint_of_a_streamed_transaction(pg_env) -> None:
    """``streaming: true``, a freshly started tap: the table's Relation message comes inside
    the savepoint that is rolled back; the rows after it must still be published. (PostgreSQL
    15 sends the Relation again after the savepoint's abort; the HeldStreams test below is
    the one that fails without the fix.)"""
    env = pg_env
    env.sql("CREATE TABLE orders (id int PRIMARY KEY, customer text)",
            f"ALTER DATABASE {env.database} SET logical_decoding_work_mem = '64kB'")
    env.write_config(streaming=True)
    env.add_jobs()
    env.tap_until_end()
    with env.connect() as conn:
        conn.autocommit = False
        with conn.cursor() as cur:
            cur.execute("SAVEPOINT s")
            cur.execute("INSERT INTO orders SELECT g, 'gone' || g FROM generate_series(1, 3000) g")
            cur.execute("ROLLBACK TO SAVEPOINT s")
            cur.execute("INSERT INTO orders SELECT g, 'kept' || g "
                        "FROM generate_series(1, 3000) g")
        conn.commit()
    env.sql("INSERT INTO orders VALUES (5000, 'a small transaction after it')")
    tap = env.tap_until_end()
    assert tap.streamed["committed"] == 1
    assert env.assert_equal("orders") == 3001


@pytest.mark.reliability
def test_a_row_change_of_an_unknown_relation_is_an_error(pg_env) -> None:
    from python_ingest.exceptions import TapError
    from python_ingest.sources.postgres import pgoutput
    from python_ingest.sources.postgres.tap import PgTap

    env = pg_env
    settings = env.settings()
    tap = PgTap(settings, settings.source(env.source))
    tap._commit_lsn = 0x1_0000_0000
    with pytest.raises(TapError, match=r"relation oid 4242 .*1/0.*restart the tap"):
        tap._handle(pgoutput.Insert(4242, ["1"]))
    with pytest.raises(TapError, match=r"relation oid 4243"):
        tap._handle(pgoutput.Truncate((4243,), False, False))


def _relation(xid: int, oid: int) -> bytes:
    import struct

    column = b"\x01id\x00" + struct.pack(">Ii", 23, -1)
    return b"R" + struct.pack(">II", xid, oid) + b"public\x00orders\x00d" + \
        struct.pack(">h", 1) + column


def _insert(xid: int, oid: int, value: bytes) -> bytes:
    import struct

    return b"I" + struct.pack(">II", xid, oid) + b"N" + struct.pack(">h", 1) + b"t" + \
        struct.pack(">i", len(value)) + value


@pytest.mark.reliability
def test_a_rolled_back_savepoint_keeps_the_relation_it_carried() -> None:
    """Protocol 2: the Relation message came in the savepoint rolled back; the transaction's
    later changes of the table (and the server's later transactions) rely on it."""
    import struct

    from python_ingest.sources.postgres import pgoutput
    from python_ingest.sources.postgres.streams import HeldStreams

    streams = HeldStreams()
    top, sub, oid = 700, 701, 16400
    handed: list = []
    for payload in (b"S" + struct.pack(">IB", top, 1), _relation(sub, oid),
                    _insert(sub, oid, b"1"), b"E",
                    b"A" + struct.pack(">II", top, sub),  # ROLLBACK TO SAVEPOINT
                    b"S" + struct.pack(">IB", top, 0), _insert(top, oid, b"2"), b"E",
                    b"c" + struct.pack(">IbQQq", top, 0, 0x5000, 0x5030, 0)):
        handed.extend(streams.read(payload))
    kinds = [type(m).__name__ for m in handed]
    assert kinds == ["Begin", "Relation", "Insert", "Commit"]
    assert handed[1].oid == oid and handed[2] == pgoutput.Insert(oid, ["2"])


@pytest.mark.reliability
def test_a_keyless_change_committed_at_the_snapshot_point_is_published(pg_env) -> None:
    """The snapshot at P holds the transactions committed before P; one whose commit record
    starts at P is streamed and must not be skipped as if in the snapshot."""
    from types import SimpleNamespace

    from python_ingest.sources.postgres.position import as_position
    from python_ingest.sources.postgres.tap import PgTap
    from python_ingest.sources.tap import keys

    settings = pg_env.settings()
    tap = PgTap(settings, settings.source(pg_env.source))
    point = 0x2_0000_0040
    tap.rows = keys.RowCounts()
    tap.rows.reset("public.tags", {}, as_position(point))
    table = SimpleNamespace(rows=tap.rows, shape=SimpleNamespace(qualified="public.tags"))
    tap.tables[16500] = table  # type: ignore[assignment]
    tap._commit_lsn = point - 0x20  # before P: in the snapshot
    assert tap._tapped(16500) is None
    tap._commit_lsn = point  # at P: streamed, not in the snapshot
    assert tap._tapped(16500) is table
