"""Binlog tap benchmark: `sluice tap` against Debezium's embedded engine on one binlog.

Starts its own private MariaDB server and embedded broker (temporary folders), fills
``bench.items`` (server side, outside the binlog), writes ``--changes`` row changes (multi-row
UPDATEs, 10,000 rows a transaction) to the binlog, then reads that same stretch of binlog,
from its start to its last event:

1. Debezium 3.5's embedded engine with its MariaDB connector (jvm/debezium-embedded, built
   by ``python -m python_ingest.runtime.embedded build``), writing each change event as JSON
   (no schema in the message: ``schemas.enable=false``) to a file; timed from the engine's
   start to the last event written. The MariaDB connector resumes by GTID only (an offset
   with a file and position alone fails), so the engine is first started fresh
   (``snapshot.mode=no_data``) before the changes are written, until it has seen one marker
   row: it then resumes from its own offset, right before the changes;
2. bare mysql-replication (decode only), the Python floor (skip with ``--no-bare``);
3. ``sluice tap`` (decode, convert, Avro-encode, produce, wait for the embedded broker's
   acks, checkpoint), from a checkpoint at the changes' start to its clean stop.

``--bootstrap N`` also bootstraps N rows first (rows/s). Prints, last:
``tap: changes=N sluice=R debezium=R ratio=X`` (R: row changes/s, ratio: sluice/debezium).
Run with ``make bench-tap``; ``--changes`` scales it down for a quick look.
"""

from __future__ import annotations

import argparse
import logging
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_settings, fill_items  # noqa: E402
from bench.common import tap_rate as rate_of  # noqa: E402
from python_ingest.cli.progress import printer  # noqa: E402
from python_ingest.kafka import broker  # noqa: E402
from python_ingest.runtime import embedded  # noqa: E402
from python_ingest.sources.binlog import server  # noqa: E402
from python_ingest.sources.binlog.bootstrap import bootstrap  # noqa: E402
from python_ingest.sources.binlog.position import BinlogCheckpoint, BinlogCheckpointStore  # noqa: E402
from python_ingest.sources.binlog.server import LocalServer  # noqa: E402
from python_ingest.sources.binlog.tap import Tap  # noqa: E402

DBZ_USER, DBZ_PASSWORD = "dbz", "dbz-secret"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bare_read(source: object, start: server.BinlogPosition) -> tuple[int, float]:
    """Row changes/s of mysql-replication alone over the binlog from ``start`` to its end."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    began = time.monotonic()
    stream = BinLogStreamReader(
        connection_settings=server.connection_settings(source),  # type: ignore[arg-type]
        server_id=4299, resume_stream=True, blocking=False, log_file=start.file,
        log_pos=start.pos, is_mariadb=False, enable_logging=False,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent])
    rows = 0
    for event in stream:
        rows += len(event.rows)
    stream.close()
    return rows, time.monotonic() - began


class Debezium:
    """Debezium's embedded engine on the bench's server (see the module doc, step 1)."""

    def __init__(self, work: Path, db: LocalServer) -> None:
        self.work = work
        self.db = db
        work.mkdir(parents=True, exist_ok=True)
        self.properties = work / "engine.properties"
        settings: dict[str, Any] = {
            "name": "bench-embedded",
            "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
            "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
            "offset.storage.file.filename": work / "offsets.dat",
            "offset.flush.interval.ms": 1000,
            "database.hostname": "127.0.0.1", "database.port": db.port,
            "database.user": DBZ_USER, "database.password": DBZ_PASSWORD,
            "database.server.id": 5499, "topic.prefix": "dbz",
            "database.include.list": "bench", "snapshot.mode": "no_data",
            "schema.history.internal": "io.debezium.storage.file.history.FileSchemaHistory",
            "schema.history.internal.file.filename": work / "history.dat",
            # JSON without a schema in every message (the schema is the connector's business)
            "converter.schemas.enable": "false", "key.converter.schemas.enable": "false",
            "value.converter.schemas.enable": "false",
            # batches as large as the tap's, no idle wait between polls
            "max.batch.size": 10_000, "max.queue.size": 40_000, "poll.interval.ms": 10,
        }
        self.properties.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        with db.root() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE USER '{DBZ_USER}'@'127.0.0.1' IDENTIFIED BY '{DBZ_PASSWORD}'")
            cur.execute("GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, "
                        f"BINLOG MONITOR, LOCK TABLES ON *.* TO '{DBZ_USER}'@'127.0.0.1'")
            cur.execute("CREATE TABLE bench.marker (id INT PRIMARY KEY)")

    def _run(self, suffix: str, events: int, timeout_s: int) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*embedded.command(), str(self.properties), str(self.work / f"{suffix}.jsonl"),
             suffix, str(events), str(timeout_s)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def prime(self) -> None:
        """A fresh start, streaming from the binlog's end, until a marker row is seen: its
        offset is then where the changes will start."""
        process = self._run(".bench.marker", 1, 180)
        marker = 0
        with self.db.root() as conn, conn.cursor() as cur:
            while process.poll() is None:
                marker += 1
                cur.execute(f"INSERT INTO bench.marker VALUES ({marker})")
                time.sleep(0.5)
        out = process.stdout.read() if process.stdout else ""
        if process.returncode != 0:
            raise SystemExit(f"Debezium's embedded engine failed to start:\n{out[-3000:]}")

    def capture(self, changes: int) -> tuple[float, float]:
        """Seconds from the engine's start to its first and last change event written."""
        process = self._run(".bench.items", changes, 1200)
        out, _ = process.communicate()
        line = next((x for x in out.splitlines() if x.startswith("events=")), None)
        if process.returncode != 0 or line is None:
            raise SystemExit(f"Debezium's embedded engine failed:\n{out[-3000:]}")
        fields = dict(part.split("=") for part in line.split())
        written = self.work / ".bench.items.jsonl"
        with written.open() as f:
            self.sample = f.readline().strip()
        self.bytes = written.stat().st_size
        return float(fields["first_ms"]) / 1000, float(fields["last_ms"]) / 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=200_000, help="row changes to read")
    parser.add_argument("--bootstrap", type=int, default=0, metavar="ROWS",
                        help="also bootstrap this many rows first (the old bench: 1000000)")
    parser.add_argument("--workers", type=int, default=2, help="bootstrap worker processes")
    parser.add_argument("--no-bare", action="store_true", help="skip bare mysql-replication")
    parser.add_argument("--no-debezium", action="store_true",
                        help="skip Debezium (for profiling the tap)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if not args.no_debezium:
        embedded.build()
    rows = max(args.changes, args.bootstrap)
    with tempfile.TemporaryDirectory(prefix="sluice-tap-bench-") as tmp:
        work = Path(tmp)
        db = LocalServer(work / "mariadb").start()
        settings = bench_settings(work, db.source_config(
            include=["bench.items"], bootstrap_chunk_rows=50_000, checkpoint_interval_s=1.0))
        source = settings.source("bench")
        broker.start(settings)
        try:
            with db.root() as conn, conn.cursor() as cur:
                seconds = fill_items(cur, rows)
                print(f"filled bench.items with {rows} rows in {seconds:.1f}s")
            if args.bootstrap:
                result = bootstrap(settings, source, "bench.items", workers=args.workers,
                                   progress=printer(sys.stdout))
                print(f"bootstrap: {result.rows} rows in {result.seconds:.1f}s = "
                      f"{result.rows_per_s:,.0f} rows/s ({args.workers} workers, "
                      f"{result.chunks} chunks)")
            dbz = None if args.no_debezium else Debezium(work / "debezium", db)
            if dbz is not None:
                dbz.prime()

            with db.root() as conn, conn.cursor() as cur:
                start = server.master_position(conn)
                step = 10_000
                for low in range(0, args.changes, step):
                    cur.execute("UPDATE bench.items SET qty = qty + 1, updated_at = NOW(6) "
                                f"WHERE id > {low} AND id <= {low + min(step, args.changes - low)}")
            print(f"wrote {args.changes} row changes to the binlog from {start}")

            dbz_rate = 0.0
            if dbz is not None:
                first, last = dbz.capture(args.changes)
                dbz_rate = args.changes / last
                print(f"debezium embedded (MariaDB connector, JSON to a file): {args.changes} "
                      f"row changes, first in {first:.1f}s, last in {last:.1f}s from the "
                      f"engine's start = {dbz_rate:,.0f} row changes/s "
                      f"({args.changes / max(last - first, 1e-9):,.0f}/s from its first event; "
                      f"{dbz.bytes:,} bytes; "
                      f"first line: {dbz.sample[:300]})")
            if not args.no_bare:
                read, seconds = bare_read(source, start)
                print(f"mysql-replication alone (decode only): {read} row changes in "
                      f"{seconds:.1f}s = {read / seconds:,.0f} row changes/s")
            BinlogCheckpointStore(settings.path(settings.state_dir), "bench").save(
                BinlogCheckpoint(start))
            began = time.monotonic()
            stats = Tap(settings, source).run(until_end=True)
            tap_rate = rate_of("sluice tap (decode + Avro + produce + acks + checkpoints)",
                               stats, time.monotonic() - began)
            ratio = tap_rate / dbz_rate if dbz_rate else 0.0
            print(f"tap: changes={args.changes} sluice={tap_rate:.0f} debezium={dbz_rate:.0f} "
                  f"ratio={ratio:.2f}")
        finally:  # the server first: the broker's stop waits for nothing of it
            db.stop()
            broker.stop(settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
