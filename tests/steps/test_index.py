"""The merge's global index (meta.<job>__index, steps/merge/index.py): it agrees with the lake after
a kill between its commit and the lake's, is built in bulk when missing, and its compaction
keeps each key's newest entry and drops delete markers only past the retention."""

from __future__ import annotations

from typing import Any

import pytest

from python_ingest.config.services import parse_services
from python_ingest.demo import trips as demo
from python_ingest.demo.trips import TripsGenerator
from python_ingest.exceptions import ConfigError
from python_ingest.kafka import broker as broker_mod
from python_ingest.steps.dbt import Dbt
from python_ingest.steps.merge.index import build_index, compact_index
from python_ingest.steps.pipeline import JobTables, run_job
from python_ingest.steps.services import maintain_job
from python_ingest.tables.checkpoints import step_checkpoint, step_properties
from python_ingest.tables.formats import append, ensure_table, table_exists
from tests.conftest import REPO, trips_job
from tests.steps.helpers import as_lake, assert_index_agrees, index_state, lake_rows


def _streamed(spark: Any, broker: str, make_settings: Any, project: Any, job_name: str, seed: int,
              batches: int, events: int) -> tuple[Any, Any, Dbt, JobTables, TripsGenerator]:
    """The demo job (its dbt project, topic and tables), then ``batches`` runs of ``events`` new
    demo events each: (settings, job, dbt, tables, the generator that knows the rows)."""
    project(job_name)
    settings = make_settings({job_name: trips_job(job_name)})
    job = settings.job(job_name)
    broker_mod.ensure_topic(broker, job.topic, 2)
    dbt = Dbt(settings)
    generator = TripsGenerator(demo.trips_schema(REPO), seed=seed, first_trip_id=1,
                               invalid_rate=0.0)
    for _ in range(batches):
        demo.produce(broker, job.topic, generator.events(events))
        run_job(spark, settings, job, dbt=dbt)
    return settings, job, dbt, JobTables(job_name, dbt.job_models(job_name)), generator


@pytest.mark.e2e
def test_a_missing_index_is_built_in_bulk_from_the_lake_and_old_tombstones(
        spark: Any, broker: str, make_settings: Any, project: Any, job_name: str) -> None:
    settings, job, dbt, tables, generator = _streamed(
        spark, broker, make_settings, project, job_name, seed=89, batches=2, events=250)
    assert tables.lake is not None
    state = index_state(spark, tables)
    deleted = sorted(k for k, (_, d) in state.items() if d)
    assert deleted
    # a warehouse from before the index: deletes were kept in meta.<job>__tombstones
    ensure_table(spark, tables.tombstones, [("_row_key", "string"), ("_ref_key", "bigint"),
                                            ("_batch_id", "bigint")])
    append(spark.createDataFrame([(k, state[k][0], 2) for k in deleted],
                                 "_row_key string, _ref_key bigint, _batch_id bigint"),
           tables.tombstones, step_properties("merge", 2))
    spark.sql(f"drop table {tables.index} purge")
    assert not table_exists(spark, tables.index)

    # late copies of old events (older than the deletes among them) and new ones
    demo.produce(broker, job.topic, iter([*generator.late_events(60), *generator.events(150)]))
    run_job(spark, settings, job, dbt=dbt)
    expected = {trip_id: as_lake(row) for trip_id, row in generator.rows.items()}
    assert lake_rows(spark, tables.lake) == expected  # no deleted row came back
    assert_index_agrees(spark, tables)
    # the bulk build carried the lake's merge checkpoint: batch 3 was appended after it
    assert step_checkpoint(spark, tables.index, "merge") == 3

    assert build_index(spark, tables) >= len(expected)  # by hand: replaces it, same state
    assert_index_agrees(spark, tables)


@pytest.mark.e2e
def test_compaction_keeps_newest_entries_and_drops_old_delete_markers(
        spark: Any, broker: str, make_settings: Any, project: Any, job_name: str) -> None:
    settings, job, dbt, tables, generator = _streamed(
        spark, broker, make_settings, project, job_name, seed=97, batches=3, events=200)
    state = index_state(spark, tables)
    entries = spark.table(tables.index).count()
    assert entries > len(state)  # keys changed in several batches

    done = maintain_job(spark, dbt, job)  # the job's retention (7 days): markers stay
    assert done[tables.index][0] == f"compacted {entries} entries to {len(state)}"
    assert index_state(spark, tables) == state
    assert step_checkpoint(spark, tables.index, "merge") == 3

    before, after = compact_index(spark, tables, retention_s=0)
    live = {k: v for k, v in state.items() if not v[1]}
    assert (before, after) == (len(state), len(live)) and len(live) < len(state)
    assert index_state(spark, tables) == live
    # merging goes on from the compacted index
    demo.produce(broker, job.topic, generator.events(150))
    run_job(spark, settings, job, dbt=dbt)
    expected = {trip_id: as_lake(row) for trip_id, row in generator.rows.items()}
    assert tables.lake is not None and lake_rows(spark, tables.lake) == expected
    assert_index_agrees(spark, tables)


def test_services_config() -> None:
    assert parse_services({"tombstone_retention": "12h", "index_compact_every": 5},
                          "jobs.t.services").tombstone_retention_s == 12 * 3600
    assert parse_services(None, "jobs.t.services").tombstone_retention_s == 7 * 24 * 3600
    assert parse_services({"tombstone_retention": 90}, "s").tombstone_retention_s == 90
    with pytest.raises(ConfigError, match="jobs.t.services.tombstone_retention"):
        parse_services({"tombstone_retention": "a week"}, "jobs.t.services")
    with pytest.raises(ConfigError, match="jobs.t.services.compact"):
        parse_services({"compact": 1}, "jobs.t.services")
    defaults = parse_services(None, "s")
    assert (defaults.compact_every, defaults.keep_commits, defaults.index_compact_every) == (
        5, 10, 20)  # Hudi's documented defaults for the first two
    off = parse_services({"compact_every": 0, "index_compact_every": 0}, "s")
    assert (off.compact_every, off.index_compact_every) == (0, 0)
    with pytest.raises(ConfigError, match="jobs.t.services.compact_every"):
        parse_services({"compact_every": -1}, "jobs.t.services")
    with pytest.raises(ConfigError, match="jobs.t.services.keep_commits"):
        parse_services({"keep_commits": 0}, "jobs.t.services")
    assert defaults.raw_retention_s == 7 * 24 * 3600
    assert parse_services({"raw_retention": "forever"}, "s").raw_retention_s is None
    assert parse_services({"raw_retention": "36h"}, "s").raw_retention_s == 36 * 3600
    with pytest.raises(ConfigError, match="jobs.t.services.raw_retention"):
        parse_services({"raw_retention": "always"}, "jobs.t.services")
