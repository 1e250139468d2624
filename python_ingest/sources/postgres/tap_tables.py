"""The PostgreSQL tap's tables (tap.py): Relation messages into tapped tables (shapes, schema
versions, topics), tables followed by relation oid, TRUNCATEs, and stopped tables."""

from __future__ import annotations

import logging
import time

from python_ingest.exceptions import (
    IncompatibleSchemaChange,
    SluiceError,
    TapError,
    UnsupportedColumn,
)
from python_ingest.sources.postgres import partitions, pgoutput, publication, server, tables
from python_ingest.sources.postgres.events import PgTable
from python_ingest.sources.postgres.fastpath import FastTable
from python_ingest.sources.postgres.position import (
    lsn_text,
)
from python_ingest.sources.postgres.shapes import catalog_relation, relation_shape
from python_ingest.sources.postgres.tap_state import TapState
from python_ingest.sources.tap import truncation
from python_ingest.sources.tap.core import topic_for
from python_ingest.sources.tap.producer import Encoder
from python_ingest.sources.tap.registry import CHANGELOG, ROW, Registry, registered_key

log = logging.getLogger("python_ingest.sources.postgres.tap")


class TapTables(TapState):
    """What the tap knows of each relation, and what it does on a table's changes of shape."""

    # ---- tables -----------------------------------------------------------------------

    def _relation(self, rel: pgoutput.Relation) -> None:
        """A table's (new) shape: registered as a new schema version when its columns changed."""
        self.relations[rel.oid] = rel
        qualified = rel.qualified
        if not server.included(self.source, rel.namespace, rel.name) or \
                qualified in self.stopped:
            self._set_table(rel.oid, None)
            return
        partitions.guard(self._conn, self.source, rel.oid)  # a partition created since
        signature = (rel.namespace, rel.name, rel.identity, rel.columns)
        if self._signatures.get(rel.oid) == signature and rel.oid in self.tables:
            return
        replaced = self._replaced(rel)
        if replaced is None:
            self._set_table(rel.oid, None)  # an older table of the name, before a bootstrap
            return
        try:
            table = self._register(rel)
        except (IncompatibleSchemaChange, UnsupportedColumn, SluiceError) as exc:
            self._stop_table(qualified, replaced + str(exc))
            self._set_table(rel.oid, None)
            return
        table.gone = self._gone.setdefault(qualified, set())  # kept across versions
        self._set_table(rel.oid, table)
        self._signatures[rel.oid] = signature

    def _replaced(self, rel: pgoutput.Relation, joined: bool | None = None) -> str | None:
        """Follows which table (relation oid) a name stands for, in stream order
        (tables.py); None when the Relation is of an older table of the name whose changes
        the table's snapshot already holds; else what to say if the shape cannot be taken.
        ``joined``: whether every row of a table created again is in the stream (a mark of
        publication.py), else the publication decides (``joins_at_create``)."""
        verdict, why = tables.follow(self._oids, rel, self._commit_lsn)
        if verdict == tables.OLDER:
            return None
        if verdict in (tables.RECREATED, tables.RENAMED):
            qualified = rel.qualified
            log.warning("source %s: %s", self.source.name, why)
            self._gone.pop(qualified, None)  # the old table's
            if not self._delete_all(qualified, why):
                return None
            if verdict == tables.RECREATED and not (joined if joined is not None else
                                                     tables.joins_at_create(
                    self._conn, self.pg.publication_name, rel.namespace)):
                self._stop_table(qualified, why + f"; the publication "
                                 f"{self.pg.publication_name} took the new table in after "
                                 "its CREATE, so its first rows are not in the stream: "
                                 f"bootstrap it: `sluice bootstrap {self.source.name} "
                                 f"{qualified}`")
                return None
            if verdict == tables.RENAMED:
                self._stop_table(qualified, why + ": its rows are not in the stream; bootstrap "
                                 f"it: `sluice bootstrap {self.source.name} {qualified}` "
                                 "(when its columns or key differ from the lake table's, start "
                                 "the table over first: docs/postgres-source.md, \"Tables "
                                 "dropped, created again or renamed\")")
                return None
            return why + "; "
        return ""

    def _delete_all(self, qualified: str, why: str) -> bool:
        """A delete of every row live in the table's topic (as TRUNCATE), with the next ref
        key; False when they cannot be known (the table is stopped)."""
        versions = Registry(self.registry_root / qualified).versions()
        if not versions or registered_key(versions[max(versions)]).kind == CHANGELOG:
            return True
        assert self.producer is not None
        schema, _, name = qualified.partition(".")
        published = truncation.truncate(self.producer, self.settings.broker.bootstrap_servers,
                                 topic_for(self.source, schema, name), versions,
                                 self._next_ref(), self._env)
        if isinstance(published, str):
            self._stop_table(qualified, f"{why}: {published}")
            return False
        self.stats.messages += published
        self.rows.clear(qualified)
        log.info("source %s: %s: published %d deletes", self.source.name, why, published)
        return True

    def _fast_path(self, oid: int, table: PgTable) -> None:
        """Off while the table has gone keys (moves.py: the fast path does not track them),
        back on after."""
        if table.gone:
            self._slow.add(oid)
            self._fast.pop(oid, None)
        else:
            self._slow.discard(oid)
            self._set_table(oid, table)

    def _set_table(self, oid: int, table: PgTable | None) -> None:
        self.tables[oid] = table
        fast = FastTable.of(table) if table is not None and not table.gone else None
        if table is not None and table.gone:
            self._slow.add(oid)
        if fast is None:
            self._fast.pop(oid, None)
        else:
            self._fast[oid] = fast

    def _register(self, rel: pgoutput.Relation) -> PgTable:
        registry = Registry(self.registry_root / rel.qualified)
        latest = registry.latest()
        found = relation_shape(self._conn, self.source, rel, latest[1] if latest else None)
        schema_id = self._register_shape(registry, latest[0] if latest else None, found.shape)
        topic = topic_for(self.source, rel.namespace, rel.name)
        return PgTable(found.shape, schema_id, Encoder(schema_id, found.shape.avro()), topic,
                       found.converters, found.identity == "f",
                       self.rows if found.shape.key.kind == ROW else None)

    def _truncate(self, oid: int) -> None:
        """A delete for every row the table's topic holds live (tap/truncation.py), with the
        TRUNCATE's ref key."""
        if oid not in self.tables:
            raise self._unknown(oid)
        table = self.tables[oid]
        if table is None:
            return
        qualified = table.shape.qualified
        if table.shape.key.kind == CHANGELOG:
            return  # an append-only changelog keeps every change
        assert self.producer is not None
        published = truncation.truncate(self.producer, self.settings.broker.bootstrap_servers,
                                 table.topic, Registry(self.registry_root / qualified).versions(),
                                 self._next_ref(), self._env)
        if isinstance(published, str):
            self._stop_table(qualified, f"TRUNCATE at {lsn_text(self._commit_lsn)}: {published}")
            self._set_table(oid, None)
            return
        self.stats.messages += published
        if table.rows is not None:
            self.rows.clear(qualified)
        if table.gone:  # every key is gone now, and the lake has none of them: nothing to
            table.gone.clear()  # drop any more (moves.py), and the fast path is back
            self._fast_path(oid, table)
        log.info("source %s: TRUNCATE %s at %s: published %d deletes", self.source.name,
                 qualified, lsn_text(self._commit_lsn), published)

    _truncated: tuple[int, set[int]] = (-2, set())  # the last Truncate: (event, relations)

    def _partition_truncate(self, msg: pgoutput.Message) -> None:
        """A TRUNCATE of one partition (partitions.py): a delete of each of its live rows."""
        if msg.prefix != partitions.PREFIX or not msg.transactional or not self._commit_lsn:
            return
        found = partitions.parse(msg.content)
        if found["root"] not in self.tables:  # not described in this session yet
            rel = catalog_relation(self._conn, found["root"])
            if rel is not None:
                self._relation(rel)
        table = self.tables.get(found["root"])
        at, oids = self._truncated
        if found["root"] in oids and at >= self.stats.events - 1:
            self._truncated = (self.stats.events, oids)  # part of a TRUNCATE of the table
            return
        if table is None or table.shape.key.kind == CHANGELOG:
            return  # not tapped (or stopped); a changelog keeps every change
        assert self.producer is not None
        qualified = table.shape.qualified
        why = f"TRUNCATE of partition {found['partition']} at {lsn_text(self._commit_lsn)}"
        versions = Registry(self.registry_root / qualified).versions()
        ref = self._next_ref()
        self.producer.flush()  # every event published before it is in the topic
        live, problem = truncation.live_rows(self.settings.broker.bootstrap_servers, table.topic,
                                      versions, ref)
        keys_gone: list[bytes] = []
        if problem is None and live:
            try:
                keys_gone = partitions.members(self._conn, table.shape, found["root"], live,
                                               found["constraint"])
            except Exception as exc:  # psycopg2.Error: the table or its types are gone
                problem = (f"the server cannot tell its rows from the table's others "
                           f"({str(exc).strip()}). Start the table over (docs/binlog-tap.md, "
                           "\"Incompatible schema changes\") and bootstrap it")
        if problem is not None:
            self._stop_table(qualified, f"{why}: {problem}")
            self._set_table(found["root"], None)
            return
        self.stats.messages += partitions.publish_deletes(
            self.producer, table.topic, versions, live, keys_gone, ref, self._env)
        if table.rows is not None:
            for key in keys_gone:
                self.rows.remove(qualified, key.decode().rsplit("#", 1)[0])
        log.info("source %s: %s of %s: published %d deletes", self.source.name, why, qualified,
                 len(keys_gone))

    _publication_checked = 0.0

    def _follow_publication(self) -> None:
        """Every second or so: the included tables outside sluice's own publication added,
        each with its mark in the stream (publication.py), so a table dropped and created
        again is followed while the tap runs."""
        now = time.monotonic()
        if self.pg.publication is not None or \
                now - self._publication_checked < max(self.source.heartbeat_s, 1.0):
            return
        self._publication_checked = now
        server.ensure_publication(self._conn, self.source)

    def _published(self, msg: pgoutput.Message) -> None:
        """A table joined sluice's publication here (publication.py's mark): a table created
        again is followed from this point of the stream: the old table's rows deleted from
        the lake, then the new one flows (it was empty) or stops for a bootstrap."""
        if not msg.transactional or not self._commit_lsn:
            return
        found = publication.parse(msg.content)
        rel = pgoutput.Relation(found["oid"], found["schema"], found["table"], "d", ())
        qualified = rel.qualified
        if not server.included(self.source, rel.namespace, rel.name) or \
                qualified in self.stopped:
            return
        known = qualified in self._oids
        if self._replaced(rel, joined=not found["rows"]) is not None and not known and \
                found["rows"]:
            log.warning("source %s: table %s joined the publication %s holding rows, which "
                        "are not in the stream: bootstrap it (`sluice bootstrap %s %s`)",
                        self.source.name, qualified, self.pg.publication_name,
                        self.source.name, qualified)

    def _stop_table(self, qualified: str, reason: str) -> None:
        """Stop publishing one table (kept in the checkpoint; a bootstrap clears it)."""
        self.stopped[qualified] = {"lsn": lsn_text(self._commit_lsn or self._seen_end()),
                                   "error": reason}
        log.error("source %s: STOPPED table %s: %s", self.source.name, qualified, reason)

    def _unknown(self, oid: int) -> TapError:
        """A change of a relation whose Relation message (its shape) never came: stop, the
        checkpoint where it is (before this transaction), rather than skip the change."""
        name = "a relation gone since"
        try:
            found = server.rows(self._conn, "SELECT %s::regclass::text", (oid,))
            name = f"now {found[0][0]}" if found and found[0][0] != str(oid) else name
        except Exception:  # noqa: BLE001 - only for the message; the error is raised anyway
            pass
        return TapError(
            f"source {self.source.name}: a change of relation oid {oid} ({name}) in the "
            f"transaction committed at {lsn_text(self._commit_lsn)} came before any Relation "
            "message describing it, so the tap cannot tell which table it is. It stopped "
            f"without moving its checkpoint ({lsn_text(self._saved)}): restart the tap (the "
            "server sends the table's Relation message again on a new connection); if this "
            "repeats, report it with the tap's log (docs/postgres-source.md)")
