"""The demo on a Spark standalone cluster vs local mode (issue #12): `make bench-cluster`.

Starts a master and two workers (one core, 2 GiB each) from pyspark's spark-class, then runs
``sluice demo --live-seconds 0`` twice, each in a fresh copy of the project (its own warehouse,
broker data and landing folder, an embedded broker on a free port): once with ``local[2]``,
once with the driver on ``spark://`` and its tasks on the two workers' executors. Prints the
wall time of each run and ends with exactly:

    cluster: workers=2 demo_local=<s> demo_cluster=<s> ratio=<cluster/local>

then a third run on the same cluster with the warehouse on a private S3 server (S3Proxy,
python_ingest/runtime/s3proxy.py: ``catalog.warehouse: s3a://...`` through the environment),
and ends with exactly:

    cluster-s3: local_s=<s> cluster_s=<s> cluster_s3_s=<s> s3_ratio=<cluster_s3/cluster>

On one 2-core machine the cluster cannot be faster: the same two cores, plus executors in
their own JVMs (task results and shuffles cross processes) and no driver-local execution.
What the figure shows is the price of going distributed, not a speed-up.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.lakefill import free_port  # noqa: E402
from python_ingest.runtime.s3proxy import S3Server  # noqa: E402
from python_ingest.runtime.standalone import LocalCluster  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
LINKED = ("models", "macros", "expectations", "schemas")
COPIED = ("sluice.yml", "dbt_project.yml", "profiles.yml")


def project_copy(root: Path) -> Path:
    """The project's config and dbt files in ``root``: relative paths (warehouse, broker data,
    landing folder) resolve inside it."""
    root.mkdir(parents=True)
    for name in COPIED:
        shutil.copy(REPO / name, root / name)
    for name in LINKED:
        if (REPO / name).exists():
            (root / name).symlink_to(REPO / name)
    return root


def demo(root: Path, master: str, s3: S3Server | None = None) -> float:
    env = {**os.environ, "SLUICE_SPARK_MASTER": master,
           "SLUICE_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}",
           "SLUICE_DBT_PROJECT_DIR": str(root)}
    if s3 is not None:  # the warehouse in a bucket: keys from AWS's variables (the chain)
        env.update(s3.env(), SLUICE_WAREHOUSE=s3.bucket("bench") + "/warehouse",
                   SLUICE_S3_PATH_STYLE="true", SLUICE_S3_REGION="us-east-1")
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "python_ingest.cli", "--config",
                             str(root / "sluice.yml"), "demo", "--live-seconds", "0"],
                            cwd=root, env=env, capture_output=True, text=True)
    took = time.monotonic() - started
    if result.returncode != 0:
        sys.exit(f"the demo on {master} failed:\n{result.stdout[-3000:]}\n"
                 f"{result.stderr[-4000:]}")
    print(f"demo on {master}{' (warehouse on S3)' if s3 else ''}: {took:.1f}s", flush=True)
    return took


def main() -> None:
    scratch = Path(tempfile.mkdtemp(prefix="sluice-bench-cluster-"))
    try:
        local = demo(project_copy(scratch / "local"), "local[2]")
        with LocalCluster(workers=2, cores=1, memory="2g") as cluster:
            print(f"cluster up: {cluster.url}, {cluster.alive_workers()} workers", flush=True)
            clustered = demo(project_copy(scratch / "cluster"), cluster.url)
            s3 = S3Server(scratch / "s3").start()
            try:
                on_s3 = demo(project_copy(scratch / "cluster-s3"), cluster.url, s3)
            finally:
                s3.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"cluster: workers=2 demo_local={local:.1f} demo_cluster={clustered:.1f} "
          f"ratio={clustered / local:.2f}")
    print(f"cluster-s3: local_s={local:.1f} cluster_s={clustered:.1f} "
          f"cluster_s3_s={on_s3:.1f} s3_ratio={on_s3 / clustered:.2f}")


if __name__ == "__main__":
    main()
