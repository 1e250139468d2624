"""``sluice changes`` and ``sluice verify --history`` on a history the pipeline wrote: real
batches of the demo's events (creates, updates, partial updates, deletes, duplicates, late
events) through a lake model with ``history=true``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from python_ingest.demo import trips as demo
from python_ingest.feed.changes import json_image
from python_ingest.kafka import broker as broker_mod
from python_ingest.steps.pipeline import run_job
from tests.conftest import REPO, trips_job

pytestmark = [pytest.mark.history, pytest.mark.e2e]


def _lake_live(spark: Any, lake: str) -> dict[str, dict[str, Any]]:
    rows = spark.sql(f"select * from {lake} where not coalesce(_is_deleted, false)").collect()
    return {r["_row_key"]: {k: v for k, v in r.asDict().items() if not k.startswith("_")}
            for r in rows}


def test_the_feed_of_real_batches_replays_to_the_lake(
        spark: Any, broker: str, make_settings: Any, project: Any, job_name: str,
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Applied in source order to an empty table, the feed of both batches gives the lake
    exactly, each update's before image the row it changed; a range lists only its batch; the
    current versions equal the lake."""
    from python_ingest.cli.main import main

    root = project(job_name)
    model = root / "models" / "lake" / f"{job_name}.sql"
    model.write_text(model.read_text().replace(
        "config(keep_tombstones=false)",
        "config(keep_tombstones=false, history=true)"))
    settings = make_settings({job_name: trips_job(job_name)})
    broker_mod.ensure_topic(broker, job_name, 2)
    generator = demo.TripsGenerator(demo.trips_schema(REPO), seed=52, first_trip_id=1)
    lakes: list[dict[str, dict[str, Any]]] = []
    for events in (lambda: generator.events(80),
                   lambda: [*generator.late_events(12), *generator.events(50)]):
        demo.produce(broker, job_name, iter(list(events())))
        result = run_job(spark, settings, settings.job(job_name))
        assert result.outcome == "succeeded", result.error
        lakes.append(_lake_live(spark, f"lake.{job_name}"))
    config = ["--config", str(tmp_path / "sluice.yml")]

    def feed(*args: str) -> list[dict[str, Any]]:
        assert main([*config, "changes", job_name, *args, "--json"]) == 0
        return [json.loads(line) for line in capsys.readouterr().out.splitlines()]

    def replay(start: dict[str, dict[str, Any]], changes: list[dict[str, Any]]
               ) -> dict[str, dict[str, Any]]:
        state = dict(start)
        for change in changes:
            if change["op"] == "delete":
                assert change["key"] in state, change
                del state[change["key"]]
            else:
                assert (change["key"] in state) == (change["op"] == "update"), change
                if change["op"] == "update":
                    assert change["before"] == state[change["key"]], change
                state[change["key"]] = change["after"]
        return state

    def plain(lake: dict[str, dict[str, Any]]) -> dict[str, Any]:
        return {k: json_image(row) for k, row in lake.items()}

    def in_source_order(changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        assert all(c["ref_key"] is not None for c in changes)  # deletes too: the closing one
        return sorted(changes, key=lambda c: (c["key"], c["ref_key"]))

    # the whole feed, each key's changes in source order (late ones where they belong),
    # applied to an empty table: the lake
    whole = feed("--since", "1")
    assert replay({}, in_source_order(whole)) == plain(lakes[1])
    second = feed("--since", "2", "--until", "2")
    # the CLI read both without a JVM (the lake model from dbt's saved manifest, the history
    # by hudi-rs): through Spark, the reference, the same lines
    from python_ingest.steps.dbt import Dbt

    saved = Dbt(settings).saved_job_models(job_name)
    assert saved is not None and saved.lake == job_name
    monkeypatch.setenv("SLUICE_NATIVE_READS", "off")
    assert feed("--since", "1") == whole and feed("--since", "2", "--until", "2") == second
    monkeypatch.delenv("SLUICE_NATIVE_READS")
    assert {c["batch_id"] for c in second} == {2} and {"insert", "update"} <= {
        c["op"] for c in second}

    assert main([*config, "verify", job_name, "--history"]) == 0
    assert f"{job_name}: EQUAL" in capsys.readouterr().out
