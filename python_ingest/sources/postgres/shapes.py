"""A PostgreSQL table's shape: its columns' specs and converters and the key its rows are
identified by, from a Relation message (the tap: ``relation_shape``) or the catalog (the
snapshot, --print-jobs: ``table_shape``): both give equal specs, so the two register the same
schema version.

The tap's shapes come from the stream, not from today's catalog by name: the Relation message
names the table and its columns (names, type oids, modifiers, replica identity flags) as they
were when the change was made; what it lacks (NOT NULL, the primary key under REPLICA IDENTITY
FULL, an index's column order) is looked up by the relation's oid, which a rename does not
change. A table dropped since (the tap is behind) keeps the key its registered version
recorded. Stored generated columns are left out on both paths: pgoutput (PostgreSQL 15) does
not send them, so the lake never has them (docs/postgres-source.md, "Generated columns").

The key (tap/keys.py ``decide``, docs/postgres-source.md "Keys"): the source's
``key_columns`` entry, else the primary key, else the replica identity index (REPLICA IDENTITY
USING INDEX) or another UNIQUE index over NOT NULL columns, else a full-row identity, which
needs REPLICA IDENTITY FULL. A table whose updates and deletes carry no old values at all
(REPLICA IDENTITY NOTHING, or DEFAULT without a primary key) is refused with the ALTER TABLE
to run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from python_ingest.config import SourceConfig
from python_ingest.exceptions import UnsupportedColumn
from python_ingest.sources.postgres import server
from python_ingest.sources.postgres.columns import Converter, PgType, converter, spec_of
from python_ingest.sources.postgres.pgoutput import Column, Relation
from python_ingest.sources.tap import keys
from python_ingest.sources.tap.columns import ColumnSpec
from python_ingest.sources.tap.kinds import Catalog
from python_ingest.sources.tap.registry import (
    CHANGELOG,
    PRIMARY,
    UNIQUE,
    KeyChoice,
    TableShape,
    registered_key,
)


@dataclass(frozen=True)
class Shape:
    """A table's shape, the converters of its columns, and its replica identity."""

    shape: TableShape
    converters: tuple[Converter, ...]
    identity: str  # d, n, f, i
    selects: tuple[str, ...] = ()  # the snapshot's SELECT expression of each column

    def select_list(self) -> str:
        return ", ".join(self.selects)


def table_shape(conn: Any, source: SourceConfig, schema: str, table: str,
                registered: dict[str, Any] | None = None) -> Shape:
    """The shape of ``schema.table`` as the catalog says it now (the snapshot, the jobs)."""
    oid = server.table_oid(conn, schema, table)
    catalog = columns(conn, oid)
    identity = server.identity(conn, oid)
    primary = server.primary_key(conn, oid)
    uniques = server.unique_keys(conn, oid, replica_index_only=identity == "i")
    return _shape(conn, source, schema, table, tuple((n, t, m) for n, t, m, _nn in catalog),
                  {n: nn for n, _t, _m, nn in catalog}, identity, primary, uniques, registered)


def relation_shape(conn: Any, source: SourceConfig, rel: Relation,
                   registered: dict[str, Any] | None = None) -> Shape:
    """The shape of the table a Relation message describes (see the module doc)."""
    described = tuple((c.name, c.type_oid, c.typmod) for c in rel.columns)
    flagged = tuple(c.name for c in rel.columns if c.is_key)
    exists = bool(server.rows(conn, "SELECT 1 FROM pg_class WHERE oid = %s", (rel.oid,)))
    known = registered_key(registered) if registered is not None else None
    if exists:  # the same table (the oid), maybe renamed since: its keys' order and NOT NULL
        not_null = {n: nn for n, _t, _m, nn in columns(conn, rel.oid)}
        catalog_primary = server.primary_key(conn, rel.oid)
        catalog_uniques = server.unique_keys(conn, rel.oid, replica_index_only=rel.identity == "i")
    else:  # dropped since: the stream and the registered version are all there is
        not_null = {}
        catalog_primary, catalog_uniques = (), []
    candidates = [catalog_primary, *(cols for _n, cols in catalog_uniques),
                  known.columns if known is not None else ()]
    if rel.identity == "d":  # the flags are the primary key as it was then
        primary: tuple[str, ...] = _ordered(flagged, candidates)
        uniques = catalog_uniques
    elif rel.identity == "i":  # the flags are the identity index's columns
        primary = ()
        name = next((n for n, cols in catalog_uniques if set(cols) == set(flagged)),
                    known.index if known is not None and known.index else "replica identity")
        uniques = [(name, _ordered(flagged, candidates))] if flagged else []
    elif exists:  # FULL flags every column: the keys from the catalog, by oid
        primary, uniques = catalog_primary, catalog_uniques
    else:
        primary, uniques = _from_registered(known, {n for n, _t, _m in described})
    for name in (*primary, *(c for _n, cols in uniques[:1] for c in cols)):
        not_null.setdefault(name, True)  # key columns are NOT NULL
    return _shape(conn, source, rel.namespace, rel.name, described, not_null, rel.identity,
                  primary, uniques, registered)


def catalog_relation(conn: Any, oid: int) -> Relation | None:
    """The Relation message pgoutput would send for the table ``oid`` now (for a logical
    message about a table the stream has not described yet: partitions.py); None when the
    table is gone."""
    found = server.rows(conn, "SELECT n.nspname, c.relname, c.relreplident FROM pg_class c "
                              "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = %s",
                        (oid,))
    if not found:
        return None
    schema, table, identity = found[0]
    if identity == "f":
        flagged = None
    elif identity == "i":
        flagged = set(next((cols for _n, cols in server.unique_keys(
            conn, oid, replica_index_only=True)), ()))
    else:
        flagged = set(server.primary_key(conn, oid))
    return Relation(oid, schema, table, identity, tuple(
        Column(n, t, m, flagged is None or n in flagged) for n, t, m, _nn in columns(conn, oid)))


def _ordered(flagged: tuple[str, ...], candidates: list[tuple[str, ...]]) -> tuple[str, ...]:
    """The flagged key columns in their key's order (a candidate with the same columns)."""
    return next((tuple(c) for c in candidates if c and set(c) == set(flagged)), flagged)


def _from_registered(known: KeyChoice | None, names: set[str]
                     ) -> tuple[tuple[str, ...], list[tuple[str, tuple[str, ...]]]]:
    if known is None or not set(known.columns) <= names:
        return (), []
    if known.kind == PRIMARY:
        return known.columns, []
    if known.kind == UNIQUE:
        return (), [(known.index or "unique", known.columns)]
    return (), []


def columns(conn: Any, oid: int) -> list[tuple[str, int, int, bool]]:
    """(name, type oid, typmod, not null) of the table's columns in table order, without its
    stored generated columns (pgoutput does not send them: module doc)."""
    return [(n, int(t), int(m), bool(nn)) for n, t, m, nn in server.rows(
        conn, "SELECT attname, atttypid, atttypmod, attnotnull FROM pg_attribute WHERE "
              "attrelid = %s AND attnum > 0 AND NOT attisdropped AND attgenerated = '' "
              "ORDER BY attnum", (oid,))]


def _types(conn: Any, oids: set[int]) -> dict[int, PgType]:
    """server.types; a type dropped since (an enum dropped with its table while the tap was
    behind) is text: pgoutput sends every value as text."""
    present = {int(r[0]) for r in server.rows(conn, "SELECT oid FROM pg_type WHERE oid = ANY(%s)",
                                             (list(oids),))}
    found = server.types(conn, present) if present else {}
    return {o: found.get(o, PgType(o, "unknown", "U", -1)) for o in oids}


def _shape(conn: Any, source: SourceConfig, schema: str, table: str,
           described: tuple[tuple[str, int, int], ...], not_null: dict[str, bool],
           identity: str, primary: tuple[str, ...],
           uniques: list[tuple[str, tuple[str, ...]]],
           registered: dict[str, Any] | None) -> Shape:
    pg_types = _types(conn, {t for _n, t, _m in described})
    specs: list[ColumnSpec] = []
    converters: list[Converter] = []
    selects: list[str] = []
    for name, type_oid, typmod in described:
        pg_type = pg_types[type_oid]
        if pg_type.typmod == -1 and typmod != -1:  # the column's modifier (a domain's wins)
            pg_type = replace(pg_type, typmod=typmod)
        try:
            spec = spec_of(name, pg_type, nullable=not not_null.get(name, False))
        except UnsupportedColumn as exc:
            raise UnsupportedColumn(f"table {schema}.{table}: {exc}") from None
        specs.append(spec)
        converters.append(converter(spec, pg_type))
        # as the output function writes it (server.raw_text: no cast, which may differ:
        # char(n)::text drops the padding, bool::text says 'true', inet::text adds /32)
        selects.append('"{}"'.format(name.replace('"', '""')))
    qualified = f"{schema}.{table}"
    setting = keys.configured(source, qualified)
    if setting != CHANGELOG and (identity == "n" or (identity == "d" and not primary)):
        raise UnsupportedColumn(server.no_identity_error(source, qualified))
    if isinstance(setting, tuple) and identity != "f" and set(setting) != set(
            primary if identity == "d" else ()) and identity != "i":
        raise UnsupportedColumn(
            f"table {qualified}: key_columns {list(setting)} are not its replica identity, so "
            "its deletes would not carry them: run ALTER TABLE "
            f"{server.quoted(schema, table)} REPLICA IDENTITY FULL (docs/postgres-source.md)")
    if identity == "i":
        primary = ()  # the identity index names the rows an update or delete changes
    key = keys.decide(source, qualified, tuple(specs), primary, uniques, registered)
    return Shape(TableShape(schema, table, tuple(specs), key), tuple(converters), identity,
                 tuple(selects))


def catalog() -> Catalog:
    """The source's tables and their shapes (tap/kinds.py)."""
    return Catalog(server.connect, server.tables,
                   lambda conn, src, db, t, reg: table_shape(conn, src, db, t, reg).shape)
