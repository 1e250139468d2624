"""Helpers of the tap tests: config, running the tap, reading topics, and the oracle; the
PostgreSQL tests' PgEnv (postgres/support.py) is a TapEnv with its own server and table reads.

The oracle applies a topic's changelog events to a plain dict in ref-key order, exactly as
the merge must: a non-newer ref key is ignored (duplicates, replays), a delete removes the row,
an update sets only its changed columns. The result must equal the MariaDB table.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from python_ingest.sources.binlog.server import LocalServer
from tests.conftest import reports_setting, warehouse_of

REPO = Path(__file__).resolve().parents[3]


@dataclass
class TapEnv:
    """One test's source, config file and state, against the session's MariaDB and broker."""

    tmp: Path
    workdir: Path
    bootstrap: str
    server: LocalServer
    database: str
    state_dir: Path | None = None
    source_overrides: dict[str, Any] = field(default_factory=dict)
    jobs: dict[str, Any] = field(default_factory=dict)
    taps: list[subprocess.Popen[str]] = field(default_factory=list)
    table_format: str = "hudi"  # of the tables the pipeline writes (the default; formats.md)

    def __post_init__(self) -> None:
        self.state_dir = self.state_dir or self.tmp / "state"
        self.write_config()

    @property
    def source(self) -> str:
        return f"src_{self.database}"

    @property
    def config(self) -> Path:
        return self.tmp / "sluice.yml"

    server_name = "MariaDB"  # in assert_equal's messages

    def source_config(self) -> dict[str, Any]:
        """The test's source in sluice.yml (with ``source_overrides``)."""
        return self.server.source_config(include=[f"{self.database}.*"],  # type: ignore[no-any-return]
                                         schema_registry=str(self.tmp / "registry"),
                                         checkpoint_interval_s=0.2, heartbeat_s=0.5,
                                         bootstrap_chunk_rows=500, **self.source_overrides)

    def write_config(self, **source_overrides: Any) -> Path:
        self.source_overrides.update(source_overrides)
        source = self.source_config()
        config = {
            "spark": {"master": "local[2]"},
            "catalog": {"name": "sluice", "type": "hadoop",
                        "warehouse": str(warehouse_of(self.workdir, self.table_format))},
            "broker": {"bootstrap_servers": self.bootstrap, "embedded": False},
            "state_dir": str(self.state_dir),
            "reports": reports_setting(),
            "table_format": self.table_format,
            "sources": {self.source: source},
            "jobs": self.jobs,
        }
        self.config.write_text(yaml.safe_dump(config, sort_keys=False))
        return self.config

    def settings(self) -> Any:
        from python_ingest.config import load_settings

        return load_settings(self.config, env={})

    def sql(self, *statements: str, params: Any = None) -> list[tuple[Any, ...]]:
        with self.server.root(self.database) as conn, conn.cursor() as cur:
            rows: list[tuple[Any, ...]] = []
            for statement in statements:
                cur.execute(statement, params)
                rows = list(cur.fetchall())
            return rows

    def change_rows(self, table: str, first_row: int, new_values: dict[str, str],
                    *statements: str) -> dict[str, list[str]]:
        """Run ``statements``, then one UPDATE of ``table`` per column of ``new_values``, on
        rows (``id``) ``first_row``, ``first_row + 1``, ...: {row key: [the column changed]}."""
        changes = list(statements)
        changed = {}
        for offset, (column, value) in enumerate(new_values.items()):
            row = first_row + offset
            changes.append(f"UPDATE {table} SET {column} = {value} WHERE id = {row}")
            changed[str(row)] = [column]
        self.sql(*changes)
        return changed

    # ---- the tap --------------------------------------------------------------------

    def add_jobs(self) -> dict[str, Any]:
        """Register the tables' schemas and put the tap's job config into sluice.yml."""
        from python_ingest.sources.tap.jobs import job_configs

        settings = self.settings()
        self.jobs.update(job_configs(settings, settings.source(self.source)))
        self.write_config()
        return self.jobs

    def tap_until_end(self) -> Any:
        """Run the tap in this process up to the binlog's (WAL's) current end."""
        from python_ingest.sources.tap import kinds

        settings = self.settings()
        tap = kinds.tap(settings, settings.source(self.source))
        tap.run(until_end=True)
        return tap

    def start_tapping(self, *statements: str) -> None:
        """Run ``statements`` (the tables), add the tables' jobs and save the tap's checkpoint
        at the log's end: what comes after is what the test's tap publishes."""
        if statements:
            self.sql(*statements)
        self.add_jobs()
        self.tap_until_end()

    def start_tap(self, wait: bool = True) -> subprocess.Popen[str]:
        """The real `sluice tap` in its own process."""
        process = subprocess.Popen(
            [sys.executable, "-m", "python_ingest.cli", "--config", str(self.config), "tap",
             self.source], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, env={**os.environ})
        self.taps.append(process)
        if wait:
            self._wait_running(process)
        return process

    def _wait_running(self, process: subprocess.Popen[str], timeout_s: float = 60) -> None:
        """Wait until the tap holds its source lock (its signal handlers are in place) and
        has saved its start position: a change written before that may fall before the tap's
        start ("current", the binlog's end when it connects) and never be tapped."""
        import fcntl

        assert self.state_dir is not None
        lock = self.state_dir / "tap" / f"{self.source}.lock"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise AssertionError(f"tap exited {process.returncode}: "
                                     f"{process.stdout.read() if process.stdout else ''}")
            if lock.exists():
                with open(lock) as handle:
                    try:
                        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        fcntl.flock(handle, fcntl.LOCK_UN)
                    except BlockingIOError:
                        if self.checkpoint() is not None:
                            return
            time.sleep(0.05)
        raise AssertionError("the tap did not start")

    def checkpoint(self) -> dict[str, Any] | None:
        assert self.state_dir is not None
        path = self.state_dir / "tap" / f"{self.source}.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def master(self) -> tuple[str, int]:
        with self.server.root() as conn, conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            row = cur.fetchone()
        return str(row[0]), int(row[1])

    def end(self) -> Any:
        """The server's current end of its log (the binlog's file and position)."""
        return self.master()

    def caught_up(self, checkpoint: dict[str, Any], end: Any) -> bool:
        return (checkpoint["file"], checkpoint["pos"]) == end

    def wait_caught_up(self, timeout_s: float = 120) -> None:
        """Wait until the tap's saved checkpoint reaches the server's current log end."""
        target = self.end()
        deadline = time.monotonic() + timeout_s
        while True:
            cp = self.checkpoint()
            if cp and self.caught_up(cp, target):
                return
            for process in self.taps:
                if process.poll() is not None and process.returncode not in (0, -9):
                    raise AssertionError(f"tap exited {process.returncode}: "
                                         f"{process.stdout.read() if process.stdout else ''}")
            if time.monotonic() > deadline:
                raise AssertionError(f"tap did not catch up: checkpoint {cp}, log end {target}")
            time.sleep(0.2)

    def kill_taps_during(self, run: Callable[[], None], rng: Any,
                         pause_s: tuple[float, float]) -> int:
        """`sluice tap` SIGKILLed at random moments (some while starting) and restarted while
        ``run`` (a workload) goes on in a thread, then once more: caught up and stopped
        cleanly. Returns how many taps were killed; taps left running are killed."""
        writer = threading.Thread(target=run)
        writer.start()
        try:
            kills = 0
            while writer.is_alive():
                tap = self.start_tap(wait=rng.random() < 0.7)
                time.sleep(rng.uniform(*pause_s))
                tap.send_signal(signal.SIGKILL)
                tap.wait()
                kills += 1
            writer.join()
            tap = self.start_tap()
            self.wait_caught_up()
            self.stop_tap(tap)
            return kills
        finally:
            writer.join()
            self.close()

    def stop_tap(self, process: subprocess.Popen[str], sig: int = signal.SIGTERM) -> str:
        process.send_signal(sig)
        out, _ = process.communicate(timeout=60)
        if sig == signal.SIGTERM:
            assert process.returncode in (0, 1), out
        return out

    def close(self) -> None:
        for process in self.taps:
            if process.poll() is None:
                process.kill()
                process.wait()

    # ---- topics and the oracle ------------------------------------------------------

    def topic(self, table: str) -> str:
        return f"{self.source}.{self.database}.{table}"

    def messages(self, table: str) -> list[tuple[bytes | None, bytes | None]]:
        from python_ingest.kafka import client as kafka_client

        topic = self.topic(table)
        out = []
        for po in kafka_client.partition_offsets(self.bootstrap, topic):
            for m in kafka_client.read_range("confluent-kafka", self.bootstrap, topic, po.partition,
                                         po.earliest, po.end, timeout_s=30):
                out.append((m.key, m.value))
        return out

    def decoder(self, table: str) -> Any:
        from python_ingest.changelog.decode import Decoder
        from python_ingest.changelog.schema import ChangelogSchema

        settings = self.settings()
        name = next(n for n, j in self.jobs.items() if j["topic"] == self.topic(table))
        return Decoder(ChangelogSchema.load(settings.job(name), settings.root))

    def oracle(self, table: str) -> dict[str, dict[str, Any]]:
        """The topic's events applied in ref-key order (the merge's semantics)."""
        decoder = self.decoder(table)
        events = []
        for key, value in self.messages(table):
            row = decoder.decode(value)
            assert key is not None and key.decode() == row["_row_key"], (key, row["_row_key"])
            events.append(row)
        events.sort(key=lambda r: r["_ref_key"])
        state: dict[str, tuple[int, dict[str, Any] | None]] = {}
        payload = [n for n, _ in decoder.schema.payload]
        for event in events:
            current = state.get(event["_row_key"])
            if current is not None and event["_ref_key"] <= current[0]:
                continue
            if event["_is_deleted"]:
                state[event["_row_key"]] = (event["_ref_key"], None)
                continue
            row = dict(current[1]) if current and current[1] is not None else None
            changed = event["_changed_columns"]
            if row is None or changed is None:
                row = {n: event[n] for n in payload}
            else:
                row.update({n: event[n] for n in changed})
            state[event["_row_key"]] = (event["_ref_key"], row)
        return {k: v[1] for k, v in state.items() if v[1] is not None}

    def table_values(self, table: str) -> tuple[Any, list[dict[str, Any]]]:
        """The table's shape and its rows' Avro values, as the tap converts them."""
        import pymysql

        from python_ingest.sources.binlog.columns import to_avro
        from python_ingest.sources.binlog.server import table_shape

        with self.server.root(self.database) as conn:
            shape = table_shape(conn, self.database, table)
            with conn.cursor(pymysql.cursors.DictCursor) as cur:
                cur.execute(f"SELECT * FROM `{table}`")
                rows = cur.fetchall()
        return shape, [{c.name: to_avro(c, raw[c.name]) for c in shape.columns} for raw in rows]

    def source_rows(self, table: str) -> dict[str, dict[str, Any]]:
        """The source's table, each value as its Avro value after an encode/decode round
        trip, by row key (the Kafka key, changelog/keys.py)."""
        from python_ingest.changelog.keys import row_key_text
        from python_ingest.changelog.schema import KEY_SEPARATOR
        from python_ingest.demo.harness import avro_rows

        shape, values = self.table_values(table)
        out = {}
        for decoded in avro_rows(shape, values):
            key = shape.key_of(decoded) if shape.key.synthetic else \
                KEY_SEPARATOR.join(str(decoded[k]) for k in shape.primary_key)
            out[row_key_text(key)] = decoded
        return out

    def assert_equal(self, table: str) -> int:
        """The oracle of the table's topic equals the source's table (NaN equals NaN);
        returns the row count."""
        expected = self.source_rows(table)
        actual = self.oracle(table)
        missing = sorted(set(expected) - set(actual))[:5]
        extra = sorted(set(actual) - set(expected))[:5]
        assert not missing and not extra, f"{table}: missing keys {missing}, extra keys {extra}"
        for key, row in expected.items():
            got = {k: _same(actual[key].get(k)) for k in row}
            want = {k: _same(v) for k, v in row.items()}
            assert got == want, \
                f"{table} row {key}: topic says {got}, {self.server_name} says {want}"
        return len(expected)


def _same(value: Any) -> Any:
    """NaN as a value equal to itself (for comparing rows)."""
    return "NaN" if isinstance(value, float) and value != value else value


class Steps:
    """A workload of ``step()``s (transactions, committed by the workload) on ``conn``, run
    ``steps`` times ``pause_s`` apart; ``rng`` from ``seed``, new rows' ids from ``first_id``."""

    def __init__(self, conn: Any, seed: int, first_id: int = 1) -> None:
        self.conn = conn
        if callable(conn.autocommit):  # PyMySQL: a method; psycopg2: an attribute
            conn.autocommit(False)
        else:
            conn.autocommit = False
        self.rng = random.Random(seed)
        self.next_id = first_id

    def step(self) -> None:
        raise NotImplementedError

    def maybe(self, make: Callable[[], Any]) -> Any:
        """A random value from ``make()``, or null one time in about seven."""
        return None if self.rng.random() < 0.15 else make()

    def run(self, steps: int, pause_s: float = 0.0) -> None:
        for _ in range(steps):
            self.step()
            if pause_s:
                time.sleep(pause_s)


def gtid_binlog_pos(server: LocalServer) -> str:
    with server.root() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos")
        return str(cur.fetchone()[0])


def wait_replicated(primary: LocalServer, replica: LocalServer, timeout_s: float = 60) -> str:
    """Wait until ``replica`` has applied (and logged) every transaction of ``primary``."""
    want = gtid_binlog_pos(primary)
    deadline = time.monotonic() + timeout_s
    while gtid_binlog_pos(replica) != want:
        if time.monotonic() > deadline:
            with replica.root() as conn, conn.cursor() as cur:
                cur.execute("SHOW SLAVE STATUS")
                status = cur.fetchone()
            raise AssertionError(f"the replica did not catch up with {want}: {status}")
        time.sleep(0.1)
    return want
