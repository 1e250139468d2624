"""Hudi tables named by location in a new process keep the write settings of their kind."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from python_ingest.runtime.catalog import (
    APPEND_ONLY_WRITE,
    HUDI_READ_CONF,
    INSERT_OPERATION,
    LAKE_WRITE,
    RECORD_INDEX_ONLY,
    bucket_write,
    insert_operation_kept,
    keep_write_settings,
    lake_properties,
    register,
)
from tests.conftest import REPO


def test_a_new_lake_takes_the_write_settings_register_restores() -> None:
    """A record-index lake is created with every write setting ``register`` gives it again;
    a bucket lake with its bucket settings and none of the record index's; the lake_merge
    materialization asks sluice for them (one table of them, not a copy in the macro)."""
    record = lake_properties("hudi", {})
    assert {k: record.get(k) for k in LAKE_WRITE} == LAKE_WRITE
    bucket = lake_properties("hudi", bucket_write(3))
    assert {k: bucket.get(k) for k in BUCKETS} == {**BUCKETS, "hoodie.bucket.index.hash.field":
                                                   "_row_key"}
    assert not [k for k in bucket if k.startswith(RECORD_INDEX_ONLY)
                and k != "hoodie.index.type"]
    assert bucket["hoodie.compact.inline"] == "false" and bucket["primaryKey"] == "_row_key"
    assert lake_properties("iceberg", {})["write.merge.mode"] == "merge-on-read"
    macro = (REPO / "macros" / "sluice_lake_properties.sql").read_text()
    assert "adapter.sluice_lake_properties(" in macro and not re.search(r"'hoodie\.", macro)


@pytest.mark.e2e
@pytest.mark.reliability
@pytest.mark.parametrize("table_format", ["hudi"])
def test_a_table_registered_by_another_process_keeps_its_write_settings(
        format_spark: Any, tmp_path: Path, job_name: str) -> None:
    """What another process does: the table exists on disk, not in its catalog. Before,
    registration dropped the write settings: the next insert into an append-only table built
    a metadata table, and a lake merge used Hudi's default index instead of the record index."""
    spark = format_spark
    warehouse = spark.conf.get("spark.sluice.warehouse")
    lake, staging = f"lake.{job_name}", f"staging.{job_name}"
    lake_path, staging_path = f"{warehouse}/lake/{job_name}", f"{warehouse}/staging/{job_name}"
    spark.sql(f"create table {lake} (k string, r bigint, v string) using hudi location "
              f"'{lake_path}' tblproperties (type='mor', primaryKey='k', preCombineField='r', "
              + ", ".join(f"'{k}'='{v}'" for k, v in LAKE_WRITE.items()) + ")")
    spark.sql(f"create table {staging} (k string) using hudi location '{staging_path}' "
              "tblproperties (type='cow', 'hoodie.metadata.enable'='false')")
    spark.sql(f"insert into {staging} values ('a')")
    for table in (lake, staging):  # forget them, as a new process has never seen them
        spark.sql(f"drop table {table}")
    register(spark, lake, lake_path)
    register(spark, staging, staging_path)
    spark.sql(f"insert into {staging} values ('b')")
    assert not Path(staging_path, ".hoodie", "metadata").exists()
    props = dict(spark.sql(f"show tblproperties {lake}").collect())
    assert {k: props.get(k) for k in LAKE_WRITE} == LAKE_WRITE
    assert dict(spark.sql(f"show tblproperties {staging}").collect())[
        "hoodie.metadata.enable"] == APPEND_ONLY_WRITE["hoodie.metadata.enable"]
    spark.sql(f"merge into {lake} using (select 'b' as k, 2L as r, 'y' as v) s "
              f"on {lake}.k = s.k when matched then update set * when not matched then insert *")
    assert sorted(map(tuple, spark.sql(f"select k, v from {lake}").collect())) == [("b", "y")]
    assert "record_index" in Path(lake_path, ".hoodie", "hoodie.properties").read_text()


BUCKETS = {  # what macros/sluice_lake_index.sql gives a new lake with lake_buckets: 3
    "hoodie.index.type": "BUCKET", "hoodie.index.bucket.engine": "SIMPLE",
    "hoodie.bucket.index.num.buckets": "3", "hoodie.bucket.index.hash.field": "k",
    "hoodie.metadata.enable": "false"}


@pytest.mark.e2e
@pytest.mark.reliability
@pytest.mark.parametrize("table_format", ["hudi"])
def test_a_bucket_lake_registered_by_another_process_keeps_one_file_group_per_bucket(
        format_spark: Any, job_name: str) -> None:
    """Hudi keeps none of a bucket index's settings on disk. Without the ones sluice keeps
    beside hoodie.properties, another process would write the lake with Hudi's default index: new
    keys in new file groups, and a bucket holding two versions of a key once the bucket
    index is used again. With them: upserts after registering land in the buckets' file
    groups, deletes flagged in ``_hoodie_is_deleted`` remove rows, one row per key."""
    spark = format_spark
    lake = f"lake.{job_name}_bucket"
    path = f"{spark.conf.get('spark.sluice.warehouse')}/lake/{job_name}_bucket"
    props = {"type": "mor", "primaryKey": "k", "preCombineField": "r",
             "hoodie.record.merge.mode": "COMMIT_TIME_ORDERING", **BUCKETS}
    spark.sql(f"create table {lake} (k string, r bigint, v string, _hoodie_is_deleted boolean) "
              f"using hudi location '{path}' tblproperties ("
              + ", ".join(f"'{k}'='{v}'" for k, v in props.items()) + ")")
    keep_write_settings(spark, path, BUCKETS)
    with insert_operation_kept(spark):
        spark.conf.set(INSERT_OPERATION, "upsert")
        spark.sql(f"insert into {lake} select cast(id as string), 1, 'a', false from range(300)")
        spark.sql(f"drop table {lake}")  # forgotten, as by a new process
        register(spark, lake, path)
        found = dict(spark.sql(f"show tblproperties {lake}").collect())
        assert {k: found.get(k) for k in BUCKETS} == BUCKETS
        assert found.get("hoodie.metadata.record.index.enable") is None
        # updates of 0-99, deletes of 100-149, inserts of 300-399
        spark.sql(f"""insert into {lake}
            select cast(id as string), 2, if(id >= 300, 'new', 'b'), id between 100 and 149
            from range(400) where id < 150 or id >= 300""")
        # registered once more: a create over an existing Hudi table rewrites its
        # hoodie.properties (keys Hudi does not know were lost there), not sluice's own file
        spark.sql(f"drop table {lake}")
        register(spark, lake, path)
        found = dict(spark.sql(f"show tblproperties {lake}").collect())
        assert {k: found.get(k) for k in BUCKETS} == BUCKETS
        spark.sql(f"insert into {lake} select cast(id as string), 3, 'b', false from range(100)")
    rows = {r[0]: (r[1], r[2]) for r in spark.sql(f"select k, r, v from {lake}").collect()}
    assert spark.table(lake).count() == len(rows) == 350
    assert all(rows[str(i)] == (3, "b") for i in range(100))
    assert not any(str(i) in rows for i in range(100, 150))
    assert all(rows[str(i)] == (1, "a") for i in range(150, 300))
    assert all(rows[str(i)] == (2, "new") for i in range(300, 400))
    groups = {name.split("_")[0] for name in os.listdir(path)
              if not name.startswith(".") and "-" in name}
    assert len(groups) == 3 and len({g[:8] for g in groups}) == 3  # one file group a bucket
    assert not Path(path, ".hoodie", "metadata").exists()


@pytest.mark.e2e
@pytest.mark.parametrize("table_format", ["hudi"])
def test_sessions_read_a_lake_with_log_files_as_hudis_file_group_reader_does(
        format_spark: Any, job_name: str) -> None:
    """Sessions read Hudi tables with the 0.x reader (HUDI_READ_CONF: about three times
    faster here, docs/formats.md). On a merge-on-read lake whose updates, deletes and inserts
    sit in log files it returns the rows Hudi 1.0's file group reader returns."""
    spark = format_spark
    assert {k: spark.conf.get(k) for k in HUDI_READ_CONF} == HUDI_READ_CONF
    lake = f"lake.{job_name}_reader"
    path = f"{spark.conf.get('spark.sluice.warehouse')}/lake/{job_name}_reader"
    spark.sql(f"create table {lake} (k bigint, r bigint, v string, d boolean) using hudi "
              f"location '{path}' tblproperties (type='mor', primaryKey='k', "
              "preCombineField='r', " + ", ".join(f"'{k}'='{v}'" for k, v in LAKE_WRITE.items())
              + ")")
    spark.sql(f"insert into {lake} select id, 0, 'v0', false from range(2000)")
    for n in (1, 2, 3):  # mutually exclusive clauses (Hudi's MERGE, sluice_apply_change_set)
        spark.sql(f"""merge into {lake} t using (
                select id as k, {n}L as r, 'v{n}' as v, id % 7 = 0 as d
                from range({n * 300}, 2000 + {n * 300}, 3)) s
            on t.k = s.k
            when matched and s.d then delete
            when matched and not s.d then update set *
            when not matched then insert *""")
    logs = [f for f in Path(path.removeprefix("file:")).iterdir() if ".log." in f.name]
    assert logs, "the merges left no log files: nothing was merged at read time"
    query = "select k, r, v from {} order by k"
    read = [tuple(r) for r in spark.sql(query.format(lake)).collect()]
    spark.read.format("hudi").option("hoodie.file.group.reader.enabled", "true").load(
        path).createOrReplaceTempView("file_group_reader")
    assert read == [tuple(r) for r in spark.sql(query.format("file_group_reader")).collect()]
    expected = {k: (k, 0, "v0") for k in range(2000)}  # the merges applied in Python
    for n in (1, 2, 3):
        for k in range(n * 300, 2000 + n * 300, 3):
            if k in expected and k % 7 == 0:
                del expected[k]
            else:
                expected[k] = (k, n, f"v{n}")
    assert read == sorted(expected.values())


SOURCE_ROW_NAMESPACES = ("raw", "errors", "staging", "lake")  # lake: the tap's error tables too


@pytest.mark.e2e
@pytest.mark.reliability
def test_the_namespace_folders_are_owner_only_or_open_to_the_group(format_spark: Any,
                                                                   job_name: str) -> None:
    """Every namespace holding source rows (#9.13, #35.6): raw, errors, staging and lake
    (where the tap's error tables live) are 0700 on both formats, created so and tightened
    when they were not, with tables written below them; ``table_permissions: group`` makes
    them 0750, and the default closes them again at the next session start."""
    import stat

    from python_ingest.runtime.catalog import PERMISSIONS_CONF
    from python_ingest.runtime.session import prepare_catalog
    from python_ingest.tables.formats import ensure_table

    spark = format_spark
    warehouse = Path(spark.conf.get("spark.sluice.warehouse").removeprefix("file:"))
    folders = [warehouse / namespace for namespace in SOURCE_ROW_NAMESPACES]
    for folder in folders:
        if folder.is_dir():
            folder.chmod(0o755)  # as an older sluice, or the umask, left it

    def modes() -> dict[str, int]:
        return {f.name: stat.S_IMODE(f.stat().st_mode) for f in folders}

    prepare_catalog(spark)
    for namespace in SOURCE_ROW_NAMESPACES:
        ensure_table(spark, f"{namespace}.{job_name}", [("k", "string")])
        spark.sql(f"insert into {namespace}.{job_name} values ('a source value')")
        assert (warehouse / namespace / job_name).is_dir()
    assert modes() == dict.fromkeys(SOURCE_ROW_NAMESPACES, 0o700)
    configured = spark.conf.get(PERMISSIONS_CONF)
    spark.conf.set(PERMISSIONS_CONF, "group")  # a session of a project with the group setting
    try:
        prepare_catalog(spark)
        assert modes() == dict.fromkeys(SOURCE_ROW_NAMESPACES, 0o750)
    finally:
        spark.conf.set(PERMISSIONS_CONF, configured)
        prepare_catalog(spark)
    assert modes() == dict.fromkeys(SOURCE_ROW_NAMESPACES, 0o700)


def test_table_permissions_is_read_from_the_config_and_handed_to_spark(tmp_path: Path) -> None:
    from python_ingest.config import load_settings
    from python_ingest.exceptions import ConfigError
    from python_ingest.runtime.catalog import PERMISSIONS_CONF
    from python_ingest.runtime.session import spark_conf

    config = tmp_path / "sluice.yml"
    config.write_text("table_permissions: group\n")
    assert spark_conf(load_settings(config, env={}))[PERMISSIONS_CONF] == "group"
    config.write_text("state_dir: .sluice\n")
    assert spark_conf(load_settings(config, env={}))[PERMISSIONS_CONF] == "owner"
    config.write_text("table_permissions: world\n")
    with pytest.raises(ConfigError) as err:
        load_settings(config, env={})
    assert err.value.field == "table_permissions" and "owner, group" in str(err.value)


@pytest.mark.e2e
@pytest.mark.parametrize("table_format", ["hudi"])
def test_a_process_names_the_shared_tables_at_start_and_a_jobs_tables_when_it_works_on_it(
        format_spark: Any, job_name: str) -> None:
    """Registering costs ~0.2 s a Hudi table: a process naming every table of a warehouse
    of a thousand tables at start spent minutes before its first step (and the test suite's
    shared warehouse made every CLI process slower than the one before). At start only the
    shared tables; a job's own when the process first works on the job; all for dbt."""
    from python_ingest.runtime.catalog import register_tables
    from python_ingest.runtime.session import NAMESPACES
    from python_ingest.tables.formats import ensure_table, name_tables
    from python_ingest.tables.names import JobModels, JobTables

    spark = format_spark
    jobs = [JobTables(f"{job_name}_{j}", JobModels(f"stg_{job_name}_{j}", f"{job_name}_{j}"))
            for j in ("a", "b")]
    shared = f"meta.{job_name}_shared"
    created = [shared, *(t for tables in jobs for t in tables.all())]
    for table in created:
        ensure_table(spark, table, [("k", "string")])
        spark.sql(f"insert into {table} values ('x')")
        spark.sql(f"drop table {table}")  # forget it, as a new process has never seen it

    def known() -> set[str]:
        return {t for t in created if spark.catalog.tableExists(t)}

    assert known() == set()
    register_tables(spark, NAMESPACES, every=False)  # a process starting
    assert known() == {shared}
    name_tables(spark, jobs[0].all())  # the process runs job a
    assert known() == {shared, *jobs[0].all()}
    assert spark.sql(f"select k from {jobs[0].staging}").collect()[0][0] == "x"
    register_tables(spark, NAMESPACES)  # a plain dbt run
    assert known() == set(created)
