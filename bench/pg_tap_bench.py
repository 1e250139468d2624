"""PostgreSQL tap benchmark: the snapshot's rate, the tap's rate, and a bare pgoutput reader.

Starts its own private PostgreSQL cluster (wal_level=logical) and embedded broker (temporary
folders), then:

1. fills ``public.items`` (int key, text, numeric(10,2), int, timestamptz, text) with
   ``--rows`` rows and bootstraps it (the slot created with an exported snapshot, the table
   copied under it in chunks): rows/s;
2. creates a second slot for the bare reader and writes exactly ``--changes`` row changes
   (UPDATEs of up to 10k rows each, one transaction each, wrapping to the first row when
   ``--changes`` exceeds ``--rows``);
3. reads that stretch of WAL twice, each side from its slot's start, both timed from their
   connection to their last row change:

   - **bare**: psycopg2's replication stream (``read_message``, in C) with every message
     decoded by pgoutput.decode into its dataclass (the column texts as str), nothing else:
     no conversion, no Avro, no Kafka, no checkpoint; it stops at the last row change;
   - **tap**: ``sluice tap`` until the WAL's end as it was at its start (``PgTap.run(
     until_end=True)``): its server checks and the error topic, the stream read by wire.py,
     each row change decoded once and Avro-encoded by the table's generated encoder
     (fastpath.py), produced to Kafka, every message acknowledged by the broker (the
     checkpoint barrier), checkpoints written and the slot confirmed.

The last line is ``pg-tap: changes=N tap=R bare=R ratio=X snapshot_rows_s=R`` (row changes/s;
ratio = tap / bare). Run with ``make bench-pg-tap``; ``--rows`` and ``--changes`` scale it down
for a quick look; ``--profile N`` prints the tap's N costliest functions (cProfile, which
slows it down); ``--py-spy FILE`` samples the tap with py-spy instead (raw collapsed stacks,
as ``py-spy record --format raw``: hardly slower; needs ptrace, as root).
"""

from __future__ import annotations

import argparse
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_settings  # noqa: E402
from bench.common import tap_rate as rate_of  # noqa: E402
from python_ingest.cli.progress import printer  # noqa: E402
from python_ingest.config.source_kinds import PostgresOptions
from python_ingest.kafka import broker  # noqa: E402
from python_ingest.sinks.pgserver import LocalPostgres  # noqa: E402
from python_ingest.sources.postgres import pgoutput, server  # noqa: E402
from python_ingest.sources.postgres.snapshot import bootstrap_tables  # noqa: E402
from python_ingest.sources.postgres.tap import PgTap  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bare_read(source: object, slot: str, publication: str, changes: int,
              stall_s: float = 30.0) -> tuple[int, float]:
    """The bare reader: (row changes, seconds) of psycopg2's replication stream with every
    message decoded by pgoutput.decode (dataclasses, column texts), nothing else, until it has
    read the ``changes`` row changes written. A stream that brings nothing for ``stall_s``
    is an error saying so, not a hang."""
    began = time.monotonic()
    conn = server.replication_connect(source)  # type: ignore[arg-type]
    cur = conn.cursor()
    cur.start_replication(slot_name=slot, decode=False, options={
        "proto_version": "1", "publication_names": publication})
    rows = 0
    kinds = (pgoutput.Insert, pgoutput.Update, pgoutput.Delete)
    last = time.monotonic()
    while rows < changes:
        message = cur.read_message()
        if message is None:
            if time.monotonic() - last > stall_s:
                conn.close()
                raise SystemExit(f"bare reader: nothing from the slot {slot} for {stall_s:.0f}s "
                                 f"after {rows} of {changes} row changes")
            select.select([cur], [], [], 0.5)
            continue
        last = time.monotonic()
        if isinstance(pgoutput.decode(message.payload), kinds):
            rows += 1
    seconds = time.monotonic() - began
    conn.close()
    return rows, seconds


class TimedTap(PgTap):
    """The tap, noting when its first Relation message came (its start ends there): one call
    per table, nothing per row."""

    first = 0.0

    def _relation(self, rel: Any) -> None:
        if not self.first:
            self.first = time.monotonic()
        super()._relation(rel)


def spy(path: str) -> subprocess.Popen[bytes]:
    """py-spy sampling this process (the tap's thread and the client's) into ``path``."""
    sampler = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record",
                                "--pid", str(os.getpid()), "--rate", "1000", "--idle",
                                "--nonblocking", "--format", "raw", "--output", path],
                               stdout=subprocess.DEVNULL)
    time.sleep(1.0)  # attached
    return sampler


def write_changes(conn: object, rows: int, changes: int, step: int = 10_000) -> None:
    """Exactly ``changes`` row changes: UPDATEs of up to ``step`` rows each (one transaction
    each), wrapping around to the table's first row when ``changes`` exceeds ``rows``."""
    done = 0
    with conn.cursor() as cur:  # type: ignore[attr-defined]
        while done < changes:
            low = done % rows
            n = min(step, changes - done, rows - low)
            cur.execute("UPDATE items SET qty = qty + 1, updated_at = now() "
                        "WHERE id > %s AND id <= %s", (low, low + n))
            done += n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows to snapshot")
    parser.add_argument("--changes", type=int, default=200_000, help="row changes for the tap")
    parser.add_argument("--workers", type=int, default=2, help="snapshot connections")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="profile the tap (cProfile) and print its N costliest functions")
    parser.add_argument("--sort", default="tottime", help="the profile's order (pstats keys)")
    parser.add_argument("--py-spy", dest="py_spy", metavar="FILE",
                        help="sample the tap with py-spy into FILE (collapsed stacks)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="sluice-pg-tap-bench-") as tmp:
        work = Path(tmp)
        pg = LocalPostgres(settings=server.LOCAL_SETTINGS).start()
        settings = bench_settings(work, {
            "kind": "postgres", "host": "127.0.0.1", "port": pg.port, "user": "sluice",
            "database": "postgres", "include": ["public.items"], "bootstrap_chunk_rows": 50_000,
            "checkpoint_interval_s": 1.0})
        source = settings.source("bench")
        broker.start(settings)
        try:
            conn = server.connect(source)
            with conn.cursor() as cur:
                began = time.monotonic()
                cur.execute("CREATE TABLE items (id int PRIMARY KEY, name text, "
                            "amount numeric(10,2), qty int, updated_at timestamptz, note text)")
                cur.execute("INSERT INTO items SELECT g, 'item ' || g, g / 100.0, g %% 97, "
                            "now() - g * interval '1 second', CASE WHEN g %% 3 = 0 THEN NULL "
                            "ELSE 'ünïcode note' END FROM generate_series(1, %s) g",
                            (args.rows,))
                cur.execute("VACUUM ANALYZE items")
                print(f"filled public.items with {args.rows} rows in "
                      f"{time.monotonic() - began:.1f}s")
            snapshot = bootstrap_tables(settings, source, "public.items", workers=args.workers,
                                        progress=printer(sys.stdout))
            snapshot_rate = snapshot.total / snapshot.seconds
            print(f"snapshot: {snapshot.total} rows in {snapshot.seconds:.1f}s = "
                  f"{snapshot_rate:,.0f} rows/s ({args.workers} connections)")
            repl = server.replication_connect(source)
            server.create_slot(repl, "bare")
            repl.close()
            write_changes(conn, args.rows, args.changes)
            conn.close()
            rows, seconds = bare_read(source, "bare", source.of(PostgresOptions).publication_name,
                                      args.changes)
            bare_rate = rows / seconds
            print(f"pgoutput alone (psycopg2 stream + decode): {rows} row changes in "
                  f"{seconds:.1f}s = {bare_rate:,.0f} row changes/s")
            profiler = None
            if args.profile:
                import cProfile

                profiler = cProfile.Profile()
                profiler.enable()
            sampler = spy(args.py_spy) if args.py_spy else None
            began = time.monotonic()
            tap = TimedTap(settings, source)
            stats = tap.run(until_end=True)
            seconds = time.monotonic() - began
            if sampler is not None:
                sampler.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
                sampler.wait(60)
            if profiler is not None:
                import pstats

                profiler.disable()
                pstats.Stats(profiler).sort_stats(args.sort).print_stats(args.profile)
            print(f"tap's phases: start {tap.first - began:.2f}s (checks, topics, "
                  f"connections, until the first Relation), stream and finish "
                  f"{began + seconds - tap.first:.2f}s")
            tap_rate = rate_of("tap (decode + convert + Avro + produce + acks + checkpoints)",
                               stats, seconds)
            print(f"pg-tap: changes={stats.row_changes} tap={tap_rate:.0f} bare={bare_rate:.0f} "
                  f"ratio={tap_rate / bare_rate:.2f} snapshot_rows_s={snapshot_rate:.0f}")
        finally:
            broker.stop(settings)
            pg.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
