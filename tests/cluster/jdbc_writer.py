"""One process committing to an Iceberg table of a JDBC catalog, one row per commit (the JDBC
catalog test runs two at once): ``python -m tests.cluster.jdbc_writer CONFIG TABLE WRITER N
FOLDER``. Once its Spark session is up it writes ``FOLDER/ready-WRITER`` and waits for
``FOLDER/go``, so that the writers' commits overlap whatever their start-up times. Prints, as
JSON, the rows it committed, the commits refused cleanly and when it ran."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    from python_ingest.config import load_settings
    from python_ingest.runtime.session import build_session

    config, table, writer, commits = argv[0], argv[1], int(argv[2]), int(argv[3])
    folder = Path(argv[4])
    spark = build_session(load_settings(config))
    (folder / f"ready-{writer}").touch()
    deadline = time.monotonic() + 300
    while not (folder / "go").exists():
        if time.monotonic() > deadline:
            raise SystemExit("no go within 300s")
        time.sleep(0.05)
    committed, refused = [], []
    started = time.time()
    for i in range(commits):
        try:
            spark.sql(f"insert into {table} values ({writer}, {i})")
            committed.append(i)
        except Exception as exc:  # a loser after its retries: refused, nothing written
            if "CommitFailedException" not in str(exc):
                raise
            refused.append(i)
    print(json.dumps({"committed": committed, "refused": refused, "started": started,
                      "ended": time.time()}))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
