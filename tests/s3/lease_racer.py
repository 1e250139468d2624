"""One of two processes racing for the same leases on an S3 warehouse (test_s3.py):
``python -m tests.s3.lease_racer CONFIG RACER ROUNDS FOLDER``. Its own Spark JVM (S3A through
sluice's settings); in each round both racers wait for each other (files in FOLDER), then
take lease ``race-<round>`` at once: a fresh one in even rounds, in odd rounds an expired one
that racer 0 left there "from another host" first. The winner holds it until the loser has
tried. Prints, as JSON, the rounds this racer won and those it was refused."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def wait_for(*files: Path) -> None:
    deadline = time.monotonic() + 120
    while not all(f.exists() for f in files):
        if time.monotonic() > deadline:
            raise SystemExit(f"waited 120 s for {files}")
        time.sleep(0.01)


def main(argv: list[str]) -> int:
    from pyspark.sql import SparkSession

    from python_ingest.config import load_settings
    from python_ingest.runtime.session import spark_conf
    from python_ingest.tables import lease

    config, racer, rounds, folder = argv[0], int(argv[1]), int(argv[2]), Path(argv[3])
    conf = spark_conf(load_settings(config))
    builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
    for key in ("spark.jars", "spark.driver.extraClassPath", "spark.sluice.warehouse"):
        builder = builder.config(key, conf[key])
    for key, value in conf.items():
        if key.startswith("spark.hadoop.fs.s3a."):
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    won, refused = [], []
    for r in range(rounds):
        name = f"race-{r}"
        if r % 2 and racer == 0:  # a lease another host held and left to expire
            path, fs = lease.lease_path(spark, name)
            fs.mkdirs(path)
            assert lease._advance(fs, path, 0, {"run": "gone", "host": "elsewhere",
                                                "pid": 1, "expires": time.time() - 1})
        (folder / f"ready-{r}-{racer}").touch()
        wait_for(folder / f"ready-{r}-0", folder / f"ready-{r}-1")
        try:
            held = lease.acquire(spark, name)
        except lease.LeaseHeldError:
            refused.append(r)
            (folder / f"tried-{r}-{racer}").touch()
            continue
        won.append(r)
        (folder / f"tried-{r}-{racer}").touch()
        wait_for(folder / f"tried-{r}-0", folder / f"tried-{r}-1")
        lease.release(held)
    print(json.dumps({"won": won, "refused": refused}))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
