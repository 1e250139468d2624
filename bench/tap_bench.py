"""Binlog tap benchmark: bootstrap rate, the tap's steady rate, and bare mysql-replication.

Starts its own private MariaDB server and embedded broker (temporary folders), then:

1. fills ``bench.items`` with 1M rows (server side) and bootstraps it: rows/s;
2. writes 200k row changes (multi-row UPDATEs) to the binlog, then reads that same stretch of
   binlog twice: with bare mysql-replication (decode only) and with the tap (decode, convert,
   Avro-encode, produce, wait for the broker's acks, checkpoint): row changes/s each.

Run with ``make bench-tap``; ``--rows`` and ``--changes`` scale it down for a quick look.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from python_ingest.cli.progress import printer  # noqa: E402
from python_ingest.config import load_settings  # noqa: E402
from python_ingest.kafka import broker  # noqa: E402
from python_ingest.sources.binlog import server  # noqa: E402
from python_ingest.sources.binlog.bootstrap import bootstrap  # noqa: E402
from python_ingest.sources.binlog.position import BinlogCheckpoint, BinlogCheckpointStore  # noqa: E402
from python_ingest.sources.binlog.server import LocalServer  # noqa: E402
from python_ingest.sources.binlog.tap import Tap  # noqa: E402


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows to bootstrap")
    parser.add_argument("--changes", type=int, default=200_000, help="row changes for the tap")
    parser.add_argument("--workers", type=int, default=2, help="bootstrap worker processes")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="sluice-tap-bench-") as tmp:
        work = Path(tmp)
        db = LocalServer(work / "mariadb").start()
        port = free_port()
        config = work / "sluice.yml"
        config.write_text(yaml.safe_dump({
            "broker": {"bootstrap_servers": f"127.0.0.1:{port}", "embedded": True,
                       "data_dir": str(work / "broker")},
            "state_dir": str(work / "state"),
            "sources": {"bench": db.source_config(include=["bench.*"], bootstrap_chunk_rows=50_000,
                                                  checkpoint_interval_s=1.0)},
        }))
        settings = load_settings(config, env={})
        source = settings.source("bench")
        broker.start(settings)
        try:
            with db.root() as conn, conn.cursor() as cur:
                cur.execute("CREATE DATABASE bench")
                cur.execute("CREATE TABLE bench.items (id INT PRIMARY KEY, name VARCHAR(40), "
                            "amount DECIMAL(10,2), qty INT, updated_at DATETIME(6), "
                            "note VARCHAR(100))")
                began = time.monotonic()
                cur.execute("SET SESSION sql_log_bin = 0")  # the fill is not part of the test
                cur.execute(f"INSERT INTO bench.items SELECT seq, CONCAT('item ', seq), "
                            f"seq / 100, seq % 97, NOW(6) - INTERVAL seq SECOND, "
                            f"IF(seq % 3 = 0, NULL, 'ünïcode note') "
                            f"FROM bench.seq_1_to_{args.rows}")
                cur.execute("SET SESSION sql_log_bin = 1")
                print(f"filled bench.items with {args.rows} rows in "
                      f"{time.monotonic() - began:.1f}s")
            result = bootstrap(settings, source, "bench.items", workers=args.workers,
                               progress=printer(sys.stdout))
            print(f"bootstrap: {result.rows} rows in {result.seconds:.1f}s = "
                  f"{result.rows_per_s:,.0f} rows/s ({args.workers} workers, "
                  f"{result.chunks} chunks)")

            with db.root() as conn, conn.cursor() as cur:
                start = server.master_position(conn)
                step = 10_000
                for low in range(0, args.changes, step):
                    cur.execute("UPDATE bench.items SET qty = qty + 1, updated_at = NOW(6) "
                                f"WHERE id > {low} AND id <= {low + step}")
            rows, seconds = bare_read(source, start)
            bare_rate = rows / seconds
            print(f"mysql-replication alone: {rows} row changes in {seconds:.1f}s = "
                  f"{bare_rate:,.0f} row changes/s")
            BinlogCheckpointStore(settings.path(settings.state_dir), "bench").save(
                BinlogCheckpoint(start))
            began = time.monotonic()
            stats = Tap(settings, source).run(until_end=True)
            seconds = time.monotonic() - began
            tap_rate = stats.row_changes / seconds
            print(f"tap (decode + Avro + produce + acks + checkpoints): {stats.row_changes} row "
                  f"changes, {stats.messages} messages in {seconds:.1f}s = {tap_rate:,.0f} row "
                  f"changes/s ({tap_rate / bare_rate:.0%} of mysql-replication alone)")
        finally:
            broker.stop(settings)
            db.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
