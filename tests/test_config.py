"""Configuration: defaults, file and environment precedence, and errors that name the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from python_ingest.changelog.schema import check_job_schemas
from python_ingest.config import Settings, load_settings, parse_size
from python_ingest.exceptions import ConfigError
from python_ingest.tables.names import JobTables

REPO = Path(__file__).resolve().parents[1]
SCHEMA = str(REPO / "schemas" / "trips.avsc")


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "sluice.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def load_checked(path: Path) -> Settings:
    """What the CLI does: read the config, then check every job's schema (before data moves)."""
    settings = load_settings(path, env={})
    check_job_schemas(settings)
    return settings


def job(**overrides: Any) -> dict[str, Any]:
    return {"topic": "t", "schema": SCHEMA, "row_key": ["trip_id"], **overrides}


def test_defaults_are_the_embedded_setup(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, {"jobs": {"trips": job()}}), env={})
    assert settings.spark.master == "local[2]"
    assert settings.catalog.type == "hadoop" and settings.broker.embedded
    trips = settings.job("trips")
    tables = JobTables(trips.name)
    assert tables.raw == "raw.trips" and tables.raw_errors == "errors.trips__raw"
    assert trips.reader == "kafka-python" and trips.starting_offsets == "earliest"
    assert settings.table_format == "hudi"  # iceberg by choice (docs/formats.md)


def test_table_format_from_file_and_environment_and_what_the_session_gets(
        tmp_path: Path) -> None:
    from python_ingest.runtime.session import spark_conf

    iceberg = load_settings(write(tmp_path, {"table_format": "iceberg", "jobs": {}}), env={})
    assert iceberg.table_format == "iceberg"
    assert spark_conf(iceberg)["spark.sql.defaultCatalog"] == "sluice"
    hudi = load_settings(write(tmp_path, {"table_format": "iceberg", "jobs": {}}),
                         env={"SLUICE_TABLE_FORMAT": "Hudi"})
    assert hudi.table_format == "hudi"
    conf = spark_conf(hudi)
    assert conf["spark.sql.defaultCatalog"] == "spark_catalog"
    assert conf["spark.sluice.table_format"] == "hudi"
    assert conf["spark.sluice.warehouse"] == str(hudi.path(hudi.catalog.warehouse))
    with pytest.raises(ConfigError, match="table_format.*'delta' is not one of hudi, iceberg"):
        load_settings(write(tmp_path, {"table_format": "delta", "jobs": {}}), env={})
    # a job's own format; the others and meta.runs keep the project's
    mixed = load_settings(write(tmp_path, {"table_format": "hudi", "jobs": {
        "a": job(), "b": job(table_format=" Iceberg")}}), env={})
    assert mixed.job("b").table_format == "iceberg"
    assert [mixed.format_of(mixed.job(n)) for n in ("a", "b")] == ["hudi", "iceberg"]


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, {"spark": {"master": "local[1]"}, "jobs": {}})
    env = {"SLUICE_SPARK_MASTER": "spark://cluster:7077", "SLUICE_CATALOG_TYPE": "rest",
           "SLUICE_CATALOG_URI": "http://catalog:8181", "SLUICE_BOOTSTRAP_SERVERS": "k1:9092",
           "SLUICE_BROKER_EMBEDDED": "false",
           "SLUICE_SPARK_CONF": "spark.executor.memory=8g;spark.sql.shuffle.partitions=64"}
    settings = load_settings(path, env=env)
    assert settings.spark.master == "spark://cluster:7077"
    assert settings.catalog.type == "rest" and settings.catalog.uri == "http://catalog:8181"
    assert settings.broker.bootstrap_servers == "k1:9092" and not settings.broker.embedded
    assert settings.spark.conf["spark.executor.memory"] == "8g"


def test_report_pages_are_written_unless_the_file_or_environment_says_no(
        tmp_path: Path) -> None:
    assert load_settings(write(tmp_path, {}), env={}).reports
    assert not load_settings(write(tmp_path, {"reports": False}), env={}).reports
    off = write(tmp_path, {"reports": True})
    assert not load_settings(off, env={"SLUICE_REPORTS": "false"}).reports
    assert load_settings(off, env={"SLUICE_REPORTS": "yes"}).reports
    with pytest.raises(ConfigError, match="reports"):
        load_settings(write(tmp_path, {"reports": "sometimes"}), env={})
    with pytest.raises(ConfigError, match="SLUICE_REPORTS"):
        load_settings(write(tmp_path, {}), env={"SLUICE_REPORTS": "maybe"})


def test_config_file_from_environment_variable(tmp_path: Path) -> None:
    path = write(tmp_path, {"jobs": {"a": job()}})
    assert set(load_settings(env={"SLUICE_CONFIG": str(path)}).jobs) == {"a"}


@pytest.mark.parametrize(("jobs", "field"), [
    ({"trips": job(topic=None)}, "jobs.trips.topic"),
    ({"trips": job(schema="missing.avsc")}, "jobs.trips.schema"),
    ({"trips": job(row_key=["nope"])}, "jobs.trips.row_key"),
    ({"trips": job(ref_key="nope")}, "jobs.trips.ref_key"),
    ({"trips": job(max_records=0)}, "jobs.trips.max_records"),
    ({"trips": job(max_bytes="12 parsecs")}, "jobs.trips.max_bytes"),
    ({"trips": job(reader="java")}, "jobs.trips.reader"),
    ({"trips": job(on_data_loss="ignore")}, "jobs.trips.on_data_loss"),
    ({"trips": job(starting_offsets="middle")}, "jobs.trips.starting_offsets"),
    ({"trips": job(max_recods=5)}, "jobs.trips.max_recods"),
    ({"Trips!": job()}, "jobs.Trips!"),
    ({"trips": job(value_format="confluent-avro")}, "jobs.trips.schema_ids"),
    ({"trips": job(table_format="delta")}, "jobs.trips.table_format"),
])
def test_bad_job_config_fails_naming_the_field(tmp_path: Path, jobs: dict[str, Any],
                                               field: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_checked(write(tmp_path, {"jobs": jobs}))
    assert err.value.field == field
    assert field in str(err.value)


def test_bad_top_level_values_fail_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="catalog.uri"):
        load_settings(write(tmp_path, {"catalog": {"type": "hive"}}), env={})
    with pytest.raises(ConfigError, match="SLUICE_BROKER_EMBEDDED"):
        load_settings(write(tmp_path, {}), env={"SLUICE_BROKER_EMBEDDED": "maybe"})
    with pytest.raises(ConfigError, match="config.sparks"):
        load_settings(write(tmp_path, {"sparks": {}}), env={})
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.yml", env={})


def test_unknown_job_names_the_known_ones(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, {"jobs": {"trips": job()}}), env={})
    with pytest.raises(ConfigError, match="known jobs: trips"):
        settings.job("rides")


def test_schema_registry_folder_reads_with_the_newest_version(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    registry.mkdir()
    (registry / "1.avsc").write_text(Path(SCHEMA).read_text())
    settings = load_checked(write(tmp_path, {"jobs": {"t": {
        "topic": "t", "schema_registry": str(registry), "value_format": "confluent-avro",
        "row_key": "trip_id"}}}))
    assert settings.job("t").schema_registry == str(registry)
    (registry / "v2.avsc").write_text("{}")
    with pytest.raises(ConfigError, match="schema_registry"):
        load_checked(tmp_path / "sluice.yml")


def test_sizes() -> None:
    assert parse_size("256MiB", "f") == 256 * 1024**2
    assert parse_size("1GB", "f") == 10**9
    assert parse_size(4096, "f") == 4096
    with pytest.raises(ConfigError):
        parse_size("-1", "f")


def test_a_jdbc_catalog_on_postgresql(tmp_path: Path) -> None:
    from python_ingest.runtime.session import spark_conf

    (tmp_path / "catalog.pw").write_text("from-file\n")
    path = write(tmp_path, {"table_format": "iceberg", "jobs": {}, "catalog": {
        "type": "jdbc", "uri": "postgresql://db:5432/sluice", "user": "sluice",
        "password_file": "catalog.pw", "warehouse": "wh"}})
    settings = load_settings(path, env={})
    conf = spark_conf(settings)
    assert conf["spark.sql.catalog.sluice.type"] == "jdbc"
    assert conf["spark.sql.catalog.sluice.uri"] == "jdbc:postgresql://db:5432/sluice"
    assert conf["spark.sql.catalog.sluice.jdbc.user"] == "sluice"
    assert conf["spark.sql.catalog.sluice.jdbc.password"] == "from-file"
    assert conf["spark.sql.catalog.sluice.warehouse"] == str(tmp_path / "wh")
    assert "from-file" not in repr(settings)
    # the environment wins: a password there replaces the file's
    env = {"SLUICE_CATALOG_URI": "jdbc:postgresql://other:5433/cat",
           "SLUICE_CATALOG_PASSWORD": "from-env"}
    settings = load_settings(path, env=env)
    assert settings.catalog.jdbc_url() == "jdbc:postgresql://other:5433/cat"
    assert settings.catalog.password_env == "SLUICE_CATALOG_PASSWORD"
    assert settings.catalog.password_file is None


@pytest.mark.parametrize(("catalog", "message"), [
    ({"type": "jdbc"}, "catalog.uri.*needs a uri.*postgresql://"),
    ({"type": "jdbc", "uri": "mysql://db/x"}, "catalog.uri.*PostgreSQL"),
    ({"type": "jdbc", "uri": "postgresql://me:secret@db/x"}, "catalog.uri.*user or password"),
    ({"type": "jdbc", "uri": "postgresql://db/x", "password": "a", "password_env": "B"},
     "catalog.password.*one way"),
    ({"type": "jdbc", "uri": "postgresql://db/x", "pasword": "a"}, "catalog.*pasword"),
])
def test_bad_catalogs_fail_naming_the_field(tmp_path: Path, catalog: dict[str, Any],
                                            message: str) -> None:
    with pytest.raises(ConfigError, match=message) as failure:
        load_settings(write(tmp_path, {"catalog": catalog, "jobs": {}}), env={})
    assert "secret" not in str(failure.value)
