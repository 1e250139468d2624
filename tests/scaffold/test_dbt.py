"""The scaffold's config edit: jobs are added under ``jobs:``, comments and order stay."""

from __future__ import annotations

from pathlib import Path

import yaml

from python_ingest.scaffold.dbt import add_jobs_to_config, dbt_name
from tests.conftest import REPO

JOB = {"topic": "shop.shop.orders", "schema_registry": "schemas/shop/shop.orders",
       "value_format": "confluent-avro", "row_key": ["trip_id"], "ref_key": "_ref_key"}


def _schemas(root: Path) -> None:
    """The files the jobs name (the config is validated after the edit)."""
    (root / "schemas" / "shop" / "shop.orders").mkdir(parents=True, exist_ok=True)
    trips = (REPO / "schemas" / "trips.avsc").read_text()
    (root / "schemas" / "trips.avsc").write_text(trips)
    (root / "schemas" / "shop" / "shop.orders" / "1.avsc").write_text(trips)


BASE = "# my config\nbroker:\n  bootstrap_servers: 127.0.0.1:9092  # local\n"


def test_jobs_are_added_under_existing_jobs_keeping_comments(tmp_path: Path) -> None:
    _schemas(tmp_path)
    config = tmp_path / "sluice.yml"
    config.write_text(BASE + "jobs:\n    # the old one\n    trips:\n      topic: demo.trips\n"
                             "      schema: schemas/trips.avsc\n      row_key: [trip_id]\n"
                             "state_dir: .sluice\n")
    assert add_jobs_to_config(config, {"shop_orders": JOB, "trips": {"topic": "x"}}) == [
        "shop_orders"]
    data = yaml.safe_load(config.read_text())
    assert data["jobs"]["shop_orders"] == JOB and data["jobs"]["trips"]["topic"] == "demo.trips"
    assert "# the old one" in config.read_text() and "# local" in config.read_text()
    assert add_jobs_to_config(config, {"shop_orders": JOB}) == []  # idempotent


def test_jobs_are_added_without_jobs_key_or_with_an_empty_one(tmp_path: Path) -> None:
    _schemas(tmp_path)
    for tail in ("", "jobs: {}\n"):
        config = tmp_path / "sluice.yml"
        config.write_text(BASE + tail)
        assert add_jobs_to_config(config, {"shop_orders": JOB}) == ["shop_orders"]
        assert yaml.safe_load(config.read_text())["jobs"] == {"shop_orders": JOB}


def test_dbt_names() -> None:
    assert dbt_name("Shop-EU") == "shop_eu" and dbt_name("1db") == "s_1db"


def test_each_added_job_says_which_key_it_took_and_why(tmp_path: Path) -> None:
    _schemas(tmp_path)
    config = tmp_path / "sluice.yml"
    config.write_text(BASE + "jobs:\n  trips:\n    topic: demo.trips\n"
                             "    schema: schemas/trips.avsc\n    row_key: [trip_id]\n")
    note = "row key full-row identity (a multiset): no primary key and no UNIQUE index"
    assert add_jobs_to_config(config, {"shop_orders": JOB}, {"shop_orders": note}) == [
        "shop_orders"]
    text = config.read_text()
    assert f"  # shop_orders: {note}\n  shop_orders:\n" in text
    assert yaml.safe_load(text)["jobs"]["shop_orders"] == JOB
