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
    from python_ingest.runtime.catalog import APPEND_ONLY_WRITE, HUDI_WRITE_CONF, location
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
    # appends as sluice's (a DataFrame write with Hudi's write settings) and a read of changes
    # (an incremental query: Hudi's merge-on-read relation, Scala reflection's classes)
    log = str(folder / "train_log")
    options = {**HUDI_WRITE_CONF, **APPEND_ONLY_WRITE, "hoodie.table.name": "train_log",
               "hoodie.datasource.write.operation": "bulk_insert",
               "hoodie.datasource.write.recordkey.field": "id"}
    source = spark.table("train_src")
    source.write.format("hudi").options(**options).mode("append").save(log)
    source.where("id < 100").write.format("hudi").options(**options).mode("append").save(log)
    spark.sql("update raw.train_mor set v = 'w' where id = 61")
    (spark.read.format("hudi").option("hoodie.datasource.query.type", "incremental")
     .option("hoodie.datasource.read.begin.instanttime", "0")
     .option("hoodie.datasource.read.end.instanttime", "99991231235959999")
     .load(location(spark, "raw.train_mor")).where("p = 1").collect())
    spark.read.format("hudi").load(log).groupBy("p").count().collect()
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
