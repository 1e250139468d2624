"""Passwords inside connection strings (issue #35.5): a DSN's, a URL's, a JDBC URL's or a
password field's never shows in a repr, an error message or a log line."""

from __future__ import annotations

import logging
import traceback
from pathlib import Path
from typing import Any

import pytest
import yaml

from python_ingest.config import load_settings
from python_ingest.config.catalog import CatalogConfig
from python_ingest.config.dispersal import KafkaTarget, PostgresTarget
from python_ingest.exceptions import ConfigError, DispersalError
from tests.conftest import REPO, free_port

SECRET = "hunter2-very-secret"


def _settings(tmp_path: Path, **sections: Any) -> Any:
    path = tmp_path / "sluice.yml"
    path.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "state"), **sections}))
    return load_settings(path, env={})


def _job(dispersal: dict[str, Any]) -> dict[str, Any]:
    return {"trips": {"topic": "t", "schema": str(REPO / "schemas" / "trips.avsc"),
                      "row_key": ["trip_id"], "dispersal": dispersal}}


def _shown(*texts: str) -> list[str]:
    """The texts that show the secret (none should)."""
    return [t for t in texts if SECRET in t]


@pytest.mark.reliability
def test_reprs_of_every_config_holding_a_connection_string_never_show_its_password(
        tmp_path: Path) -> None:
    settings = _settings(
        tmp_path,
        spark={"master": "local[2]",
               "conf": {"spark.sql.catalog.other.jdbc.password": SECRET,
                        "spark.hadoop.fs.s3a.secret.key": SECRET}},
        catalog={"type": "jdbc", "uri": "postgresql://db:5432/sluice", "user": "sluice",
                 "password": SECRET},
        broker={"bootstrap_servers": f"sluice:{SECRET}@kafka:9092", "embedded": False},
        sources={"shop": {"host": "db", "password": SECRET}},
        jobs=_job({
            "url": {"type": "postgres", "table": "trips",
                    "url": f"postgresql://app:{SECRET}@db:5432/app"},
            "keyvalue": {"type": "postgres", "table": "trips",
                         "dsn": f"host=db dbname=app user=app password={SECRET} port=5432"},
            "quoted": {"type": "postgres", "table": "trips",
                       "dsn": f"host=db password='{SECRET} x' dbname=app"},
            "field": {"type": "postgres", "table": "trips", "dsn": "host=db",
                      "password": SECRET},
            "topic": {"type": "kafka", "topic": "lake.trips",
                      "bootstrap_servers": f"app:{SECRET}@kafka:9092"}}))
    targets = settings.job("trips").dispersal
    shown = [repr(settings), str(settings), repr(settings.catalog), repr(settings.spark),
             repr(settings.broker), repr(settings.source("shop")), repr(settings.job("trips")),
             *(repr(t) for t in targets.values()), *(str(t) for t in targets.values())]
    assert _shown(*shown) == []
    # what is not secret still shows: where the connection goes, and as whom
    assert "db:5432/app" in repr(targets["url"]) and "app:" in repr(targets["url"])
    assert "user=app" in repr(targets["keyvalue"]) and "dbname=app" in repr(targets["quoted"])
    assert targets["url"].conninfo("x")[0] == f"postgresql://app:{SECRET}@db:5432/app"
    assert settings.catalog.reveal_password() == SECRET
    direct = [PostgresTarget("pg", "t", dsn=f"postgresql://u:{SECRET}@h/db"),
              PostgresTarget("pg", "t", dsn=f"host=h password={SECRET}"),
              KafkaTarget("k", "t", bootstrap_servers=f"u:{SECRET}@h:9092"),
              CatalogConfig(type="rest", uri=f"https://u:{SECRET}@catalog/v1")]
    assert _shown(*map(repr, direct)) == []


@pytest.mark.reliability
@pytest.mark.parametrize("uri", [
    f"jdbc:postgresql://db:5432/sluice?user=sluice&password={SECRET}",
    f"postgresql://db/sluice?sslmode=require&password={SECRET}",
    f"jdbc:mysql://db/sluice?password={SECRET}",
    f"postgresql://sluice:{SECRET}@db/sluice",
])
def test_a_catalog_uri_holding_a_password_is_refused_without_quoting_it(tmp_path: Path,
                                                                       uri: str) -> None:
    """A JDBC catalog's uri goes to Spark's conf, where only keys naming a password are
    redacted: a password inside it would show in Spark's and Iceberg's logs."""
    with pytest.raises(ConfigError) as err:
        _settings(tmp_path, catalog={"type": "jdbc", "uri": uri})
    assert err.value.field == "catalog.uri" and _shown(str(err.value)) == []


@pytest.mark.reliability
def test_a_dsn_that_is_not_text_is_refused_without_quoting_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        _settings(tmp_path, jobs=_job({"pg": {"type": "postgres", "table": "trips",
                                              "dsn": {"host": "db", "password": SECRET}}}))
    assert err.value.field == "jobs.trips.dispersal.pg.dsn" and _shown(str(err.value)) == []


@pytest.mark.reliability
@pytest.mark.parametrize("dsn", [
    "postgresql://app:{secret}@127.0.0.1:{port}/app?connect_timeout=5",
    "host=127.0.0.1 port={port} user=app password={secret} connect_timeout=5",
    "host=127.0.0.1 port={port} password={secret} pw",  # libpq quotes the piece it stumbled on
    "postgresql://app:{secret} pw@127.0.0.1:{port}/app",
    "postgresql://app:%ZZ{secret}@127.0.0.1:{port}/app",
    "jdbc:postgresql://127.0.0.1:{port}/app?user=app&password={secret}",
])
def test_a_failing_connection_names_the_target_never_the_password(
        dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    """A closed port, or a DSN libpq cannot read: the error (and its traceback, and any log
    line) names the target and the cause, never the password."""
    from python_ingest.sinks.postgres import connect

    target = PostgresTarget("pg", "trips", dsn=dsn.format(secret=SECRET, port=free_port()))
    with caplog.at_level(logging.DEBUG), pytest.raises(DispersalError) as err:
        connect(target, "jobs.trips.dispersal.pg")
    text = "".join(traceback.format_exception(err.value))
    assert str(err.value).startswith("jobs.trips.dispersal.pg: ")
    assert _shown(text, caplog.text) == [] and "hunter2" not in text
    assert " pw" not in text and '"pw"' not in text  # the password's second word


@pytest.mark.reliability
def test_a_password_field_is_masked_in_a_refused_connection(
        caplog: pytest.LogCaptureFixture) -> None:
    """The password given apart from the DSN (password_env here): the driver never quotes it,
    and neither does sluice."""
    target = PostgresTarget("pg", "trips", password_env="SLUICE_TEST_PG_PASSWORD",
                            dsn=f"host=127.0.0.1 port={free_port()} user=app connect_timeout=5")
    from python_ingest.sinks.postgres import connect

    with pytest.MonkeyPatch.context() as env:
        env.setenv("SLUICE_TEST_PG_PASSWORD", SECRET)
        with caplog.at_level(logging.DEBUG), pytest.raises(DispersalError) as err:
            connect(target, "jobs.trips.dispersal.pg")
    assert "cannot connect to PostgreSQL" in str(err.value)
    assert _shown(str(err.value), caplog.text, repr(target)) == []


@pytest.mark.parametrize(("text", "expected"), [
    ("postgresql://u:p4ss@h:5432/db", "postgresql://u:***@h:5432/db"),
    ("jdbc:postgresql://h/db?user=u&password=p4ss&ssl=true",
     "jdbc:postgresql://h/db?user=u&password=***&ssl=true"),
    ("jdbc:sqlserver://h;user=u;password=p4ss;db=x", "jdbc:sqlserver://h;user=u;password=***;db=x"),
    ("host=h password=p4ss dbname=d", "host=h password=*** dbname=d"),
    ("host=h password = 'p 4\\'ss' dbname=d", "host=h password = *** dbname=d"),
    ("spark.sql.catalog.x.jdbc.password=p4ss", "spark.sql.catalog.x.jdbc.password=***"),
    ("PGPASSWORD=p4ss db_password=p4ss", "PGPASSWORD=*** db_password=***"),
    ("postgresql://u@h/db password_env=X password_file=/run/s", None),
    ("s3a://key:p4ss@bucket/warehouse", "s3a://key:***@bucket/warehouse"),
    ("sluice:p4ss@kafka1:9092,sluice:p4ss@kafka2:9092",
     "sluice:***@kafka1:9092,sluice:***@kafka2:9092"),
    ("127.0.0.1:19092 http://h:8081/subjects at 12:30", None),
])
def test_redact_masks_the_password_of_every_form(text: str, expected: str | None) -> None:
    from python_ingest.config.secrets import redact

    assert redact(text) == (text if expected is None else expected)
    assert redact(f"it said p4ss to {text}", "p4ss") == \
        "it said *** to " + (text if expected is None else expected).replace("p4ss", "***")
