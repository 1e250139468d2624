"""The demo on a Spark standalone cluster vs local mode (issue #12): `make bench-cluster`.

Starts a master and two workers (one core, 2 GiB each) from pyspark's spark-class, then runs
``sluice demo --live-seconds 0`` twice, each in a fresh copy of the project (its own warehouse,
broker data and landing folder, an embedded broker on a free port): once with ``local[2]``,
once with the driver on ``spark://`` and its tasks on the two workers' executors. Prints the
wall time of each run and ends with exactly:

    cluster: workers=2 demo_local=<s> demo_cluster=<s> ratio=<cluster/local>

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


def demo(root: Path, master: str) -> float:
    env = {**os.environ, "SLUICE_SPARK_MASTER": master,
           "SLUICE_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}",
           "SLUICE_DBT_PROJECT_DIR": str(root)}
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "python_ingest.cli", "--config",
                             str(root / "sluice.yml"), "demo", "--live-seconds", "0"],
                            cwd=root, env=env, capture_output=True, text=True)
    took = time.monotonic() - started
    if result.returncode != 0:
        sys.exit(f"the demo on {master} failed:\n{result.stdout[-3000:]}\n"
                 f"{result.stderr[-4000:]}")
    print(f"demo on {master}: {took:.1f}s", flush=True)
    return took


def main() -> None:
    scratch = Path(tempfile.mkdtemp(prefix="sluice-bench-cluster-"))
    try:
        local = demo(project_copy(scratch / "local"), "local[2]")
        with LocalCluster(workers=2, cores=1, memory="2g") as cluster:
            print(f"cluster up: {cluster.url}, {cluster.alive_workers()} workers", flush=True)
            clustered = demo(project_copy(scratch / "cluster"), cluster.url)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"cluster: workers=2 demo_local={local:.1f} demo_cluster={clustered:.1f} "
          f"ratio={clustered / local:.2f}")


if __name__ == "__main__":
    main()
