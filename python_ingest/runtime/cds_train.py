"""The class-data-sharing archive's training run (runtime/cds.py starts it in its own process,
with ``SLUICE_CDS_TRAIN`` naming the archive the JVM writes at exit):

    python -m python_ingest.runtime.cds_train FOLDER
"""

from __future__ import annotations

import sys
from pathlib import Path

from python_ingest.runtime.cds import TRAIN_TIMEOUT_S


def train(folder: Path) -> None:
    """The training run, in its own process: a session, then Hudi (merge-on-read and
    copy-on-write) and Iceberg tables created, written, merged and read the way sluice's
    steps do, so their classes are in the archive."""
    import pandas as pd
    import yaml
    from pyspark import SparkContext

    from python_ingest.config import load_settings
    from python_ingest.runtime.session import build_session

    config = folder / "sluice.yml"
    config.write_text(yaml.safe_dump({
        "spark": {"master": "local[2]"},
        "catalog": {"name": "sluice", "type": "hadoop", "warehouse": str(folder / "warehouse")},
        "state_dir": str(folder / "state"),
        "broker": {"bootstrap_servers": "localhost:9092", "embedded": False},
        "jobs": {}}))
    spark = build_session(load_settings(config, env={}))
    rows = pd.DataFrame({"id": range(300), "v": [f"v{i}" for i in range(300)],
                         "ts": pd.Timestamp("2026-01-01"), "p": [i % 3 for i in range(300)]})
    spark.createDataFrame(rows).createOrReplaceTempView("train_src")
    for table, props in (("raw.train_mor", "type='mor', primaryKey='id', preCombineField='ts'"),
                         ("raw.train_cow", "type='cow', primaryKey='id', preCombineField='ts'")):
        spark.sql(f"create table {table} (id bigint, v string, ts timestamp, p bigint) "
                  f"using hudi tblproperties ({props})")
        spark.sql(f"insert into {table} select * from train_src")
        spark.sql(f"""merge into {table} t using (
                        select id, concat(v, 'x') as v, ts, p from train_src where id < 60) s
                      on t.id = s.id
                      when matched and s.id % 7 = 0 then delete
                      when matched then update set *
                      when not matched then insert *""")
        spark.sql(f"select p, count(*), max(v) from {table} group by p").collect()
    # sluice's own append (a DataFrame write with its commit metadata) and incremental read
    # (Hudi's merge-on-read relation: Scala reflection's classes): the step tables' path
    from python_ingest.tables.hudi import HUDI

    HUDI.ensure_table(spark, "raw.train_log", [("id", "bigint"), ("v", "string"),
                                               ("ts", "timestamp"), ("p", "bigint")])
    source = spark.table("train_src")
    HUDI.append(source, "raw.train_log", {})
    since = HUDI.position(spark, "raw.train_mor")
    HUDI.append(source.where("id < 100"), "raw.train_log", {})
    spark.sql("update raw.train_mor set v = 'w' where id = 61")
    HUDI.read_changes(spark, "raw.train_mor", since, str(HUDI.position(spark, "raw.train_mor"))
                      ).where("p = 1").collect()
    HUDI.read_changes(spark, "raw.train_log", None, "").groupBy("p").count().collect()
    spark.sql("create table sluice.raw.train_ice (id bigint, v string, ts timestamp, p bigint) "
              "using iceberg")
    spark.sql("insert into sluice.raw.train_ice select * from train_src")
    spark.sql("""merge into sluice.raw.train_ice t using (select * from train_src where id < 60) s
                 on t.id = s.id when matched then update set * when not matched then insert *""")
    spark.sql("""select * from (select *, row_number() over (partition by p order by ts desc)
                 as n from sluice.raw.train_ice) where n = 1""").collect()
    spark.table("raw.train_mor").write.mode("overwrite").parquet(str(folder / "parquet"))
    gateway = SparkContext._gateway
    spark.stop()
    if gateway is not None and gateway.proc is not None:  # the JVM writes the archive at exit
        gateway.shutdown()
        gateway.proc.stdin.close()
        gateway.proc.wait(timeout=TRAIN_TIMEOUT_S)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    train(Path(sys.argv[1]))
