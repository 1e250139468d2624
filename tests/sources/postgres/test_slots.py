"""The PostgreSQL source's slot checks (issue #50.6, #50.15): a slot confirmed past the tap's
checkpoint is refused at start, and a slot no configured source reads is named, with how to
drop it, by `sluice status` and the tap."""

from __future__ import annotations

import logging

import pytest

pytestmark = [pytest.mark.postgres_source, pytest.mark.reliability]


def test_a_slot_confirmed_past_the_checkpoint_is_refused_naming_both_lsns(pg_env) -> None:
    from python_ingest.exceptions import TapError
    from python_ingest.sources.postgres import server
    from python_ingest.sources.postgres.position import (
        PgCheckpoint,
        PgCheckpointStore,
        lsn_text,
        parse_lsn,
    )

    env = pg_env
    env.sql("CREATE TABLE orders (id int PRIMARY KEY, v text)")
    env.add_jobs()
    env.tap_until_end()
    older = env.checkpoint()["lsn"]
    env.sql("INSERT INTO orders SELECT g, 'v' FROM generate_series(1, 20) g")
    env.tap_until_end()
    settings = env.settings()
    conn = server.connect(settings.source(env.source))
    server.wait_inactive(conn, settings.source(env.source))  # its last status update read
    conn.close()
    confirmed = env.sql("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                        f"WHERE slot_name = 'sluice_{env.source}'")[0][0]
    assert parse_lsn(confirmed) > parse_lsn(older)
    # the checkpoint file restored from an older backup: the slot is past it
    store = PgCheckpointStore(env.state_dir, env.source)
    store.save(PgCheckpoint(parse_lsn(older), f"sluice_{env.source}"))
    with pytest.raises(TapError, match=rf"confirmed up to {confirmed}, past the tap's "
                                       rf"checkpoint {older}.*pg_drop_replication_slot"
                                       rf"\('sluice_{env.source}'\).*sluice bootstrap"):
        env.tap_until_end()
    assert lsn_text(store.load().lsn) == older  # nothing moved
    # what the message says works: drop the slot, bootstrap every table
    conn = server.connect(settings.source(env.source))
    server.wait_inactive(conn, settings.source(env.source))
    conn.close()
    env.sql(f"SELECT pg_drop_replication_slot('sluice_{env.source}')")
    env.bootstrap_all()
    env.sql("INSERT INTO orders VALUES (100, 'after')")
    env.tap_until_end()
    assert env.assert_equal("orders") == 21


def test_a_slot_no_source_reads_is_named_with_how_to_drop_it(pg_env, caplog) -> None:
    import json

    from tests.conftest import sluice_cmd

    env = pg_env
    env.sql("CREATE TABLE orders (id int PRIMARY KEY)")
    gone = f"sluice_removed_{env.database}"
    env.sql(f"SELECT pg_create_logical_replication_slot('{gone}', 'pgoutput')")
    env.add_jobs()
    with caplog.at_level(logging.WARNING):
        env.tap_until_end()
    assert any(gone in r.getMessage() and "pg_drop_replication_slot" in r.getMessage()
               for r in caplog.records)
    done = sluice_cmd(env.config, "status", "--json")
    assert done.returncode == 0, done.stderr
    entry = json.loads(done.stdout)["sources"][env.source]
    assert any(f"SELECT pg_drop_replication_slot('{gone}')" in w
               for w in entry["unused_slots"]), entry
    assert not any(f"sluice_{env.source} " in w for w in entry["unused_slots"])  # its own
    text = sluice_cmd(env.config, "status").stdout
    assert f"WARNING: the slot {gone} (database {env.database}) is read by no source" in text
