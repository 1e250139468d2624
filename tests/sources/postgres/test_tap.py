"""The PostgreSQL tap against a private cluster and the session's broker: changes into
topics, checkpoints, the slot confirmed behind them, replica identities, TRUNCATE, schema
changes, and the errors that tell the user what to do."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.postgres_source

ORDERS = """CREATE TABLE orders (
  id serial PRIMARY KEY, customer text NOT NULL, amount numeric(12,2), status varchar(20),
  updated_at timestamptz DEFAULT now())"""


def test_changes_reach_topics_and_the_checkpoint_confirms_the_slot(pg_env) -> None:
    env = pg_env
    env.sql(ORDERS)
    env.add_jobs()
    env.tap_until_end()  # creates the publication and the slot, nothing to publish yet
    env.sql("INSERT INTO orders (customer, amount, status) SELECT 'c' || g, g * 1.5, 'new' "
            "FROM generate_series(1, 50) g",
            "UPDATE orders SET status = 'paid', amount = amount + 1 WHERE id % 3 = 0",
            "DELETE FROM orders WHERE id % 5 = 0")
    with env.connect() as conn, conn.cursor() as cur:  # one transaction touching a row twice
        conn.autocommit = False
        cur.execute("UPDATE orders SET status = 'a' WHERE id = 1")
        cur.execute("UPDATE orders SET status = 'b' WHERE id = 1")
        cur.execute("UPDATE orders SET id = 1000 WHERE id = 2")  # a key change
        conn.commit()
    tap = env.tap_until_end()
    assert tap.stats.transactions >= 4 and tap.stats.errors == 0
    assert env.assert_equal("orders") == 40
    checkpoint = env.checkpoint()
    slot = env.sql("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                   f"WHERE slot_name = 'sluice_{env.source}'")[0][0]
    assert checkpoint["lsn"] == slot  # confirmed exactly where the checkpoint is
    again = env.tap_until_end()  # nothing new: nothing published again
    assert again.stats.messages == 0
