"""Key changes that leave a TOASTed value unchanged (python_ingest/sources/postgres/moves.py,
issue #58.4): gone keys end at a TRUNCATE, and the values such a change carries itself are
taken from it, not read from the table as it is later."""

from __future__ import annotations

import hashlib

import pytest

from tests.sources.postgres.support import decoded_events as _events
from tests.sources.postgres.support import tapped_docs

pytestmark = [pytest.mark.postgres_source, pytest.mark.reliability]

def test_a_truncate_clears_the_gone_keys_and_the_fast_path_comes_back(pg_env) -> None:
    """A key change whose row is gone leaves its new key 'gone' until the stream deletes or
    inserts it; a TRUNCATE removes every key, but the gone keys stayed: in the checkpoint and
    with the table off the fast path for good. Now the TRUNCATE clears them."""
    from python_ingest.sources.postgres.tap import PgTap

    env = pg_env
    tapped_docs(env)
    env.sql("UPDATE docs SET doc_id = 101 WHERE doc_id = 1",  # gone when read: 101 is gone
            "TRUNCATE docs",  # which removes every key, 101 too
            "INSERT INTO docs VALUES (7, 'after', 'short')")

    class Watched(PgTap):  # what the tap held just before the TRUNCATE
        def _truncate(self, oid: int) -> None:
            held.append({q: set(k) for q, k in self._gone.items()})
            super()._truncate(oid)

    held: list[dict[str, set[str]]] = []
    settings = env.settings()
    tap = Watched(settings, settings.source(env.source))
    tap.run(until_end=True)
    assert held == [{"public.docs": {"101"}}]
    assert not tap._slow and tap._fast  # the insert after the TRUNCATE took the fast path
    assert "gone" not in env.checkpoint()
    assert env.assert_equal("docs") == 1
    env.sql("UPDATE docs SET title = 'fast' WHERE doc_id = 7")
    again = env.tap_until_end()  # a new tap, from the checkpoint: fast from its start
    assert not again._slow and again.stats.messages == 1
    assert env.assert_equal("docs") == 1


def test_a_key_change_takes_the_values_it_carries_from_itself(pg_env) -> None:
    """A composite key whose TOASTed text part an update leaves alone while it changes the
    other part: the old key carries that value, the new tuple does not. The tap read it from
    the table as it is when the tap gets there, by the new key; under a case-insensitive
    collation the row it found held a later transaction's value (its case changed), so the
    key change's version showed that later value, under a key the row never had then. Now a
    value the change carries comes from the change itself."""
    env = pg_env
    env.sql("CREATE COLLATION IF NOT EXISTS anycase (provider = icu, "
            "locale = 'und-u-ks-level2', deterministic = false)",
            "CREATE TABLE tags (id int, tag text COLLATE anycase, note text, "
            "PRIMARY KEY (id, tag))",
            "ALTER TABLE tags ALTER COLUMN tag SET STORAGE EXTERNAL")
    env.add_jobs()
    env.tap_until_end()
    env.sql("INSERT INTO tags SELECT 1, repeat(md5('a'), 80), 'first'")
    env.tap_until_end()
    env.sql("UPDATE tags SET id = 2 WHERE id = 1",  # the tag left alone (not in the new tuple)
            "UPDATE tags SET tag = upper(tag) WHERE id = 2")  # later: equal, but upper case
    tap = env.tap_until_end()
    assert tap.stats.errors == 0 and not tap.stopped
    events = _events(env, "tags")[1:]  # after the first insert
    big = hashlib.md5(b"a").hexdigest() * 80
    inserted = [(e["id"], e["tag"], e["note"]) for e in events if not e["_is_deleted"]]
    assert inserted == [(2, big, "first"), (2, big.upper(), "first")]
    assert env.assert_equal("tags") == 1
