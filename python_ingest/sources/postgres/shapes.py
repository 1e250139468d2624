"""A PostgreSQL table's shape: its columns' specs and converters and the key its rows are
identified by, from a Relation message (the tap) or the catalog (the snapshot, --print-jobs):
both give equal specs, so the two register the same schema version.

The key (binlog/keys.py ``decide``, docs/postgres-source.md "Keys"): the source's
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
from python_ingest.sources.binlog import keys
from python_ingest.sources.binlog.columns import ColumnSpec
from python_ingest.sources.binlog.registry import CHANGELOG, TableShape
from python_ingest.sources.postgres import server
from python_ingest.sources.postgres.columns import Converter, converter, spec_of


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
                registered: dict[str, Any] | None = None,
                relation: tuple[tuple[str, int, int], ...] | None = None,
                identity: str | None = None) -> Shape:
    """The shape of ``schema.table``: columns from ``relation`` ((name, type oid, typmod) of a
    Relation message) or the catalog; nullability and keys from the catalog."""
    oid = server.table_oid(conn, schema, table)
    catalog = server.columns(conn, oid)
    not_null = {name: nn for name, _t, _m, nn in catalog}
    described = relation or tuple((n, t, m) for n, t, m, _nn in catalog)
    pg_types = server.types(conn, {t for _n, t, _m in described})
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
    identity = identity or server.identity(conn, oid)
    qualified = f"{schema}.{table}"
    primary = server.primary_key(conn, oid)
    setting = keys.configured(source, qualified)
    if setting != CHANGELOG and (identity == "n" or (identity == "d" and not primary)):
        raise UnsupportedColumn(server.no_identity_error(source, qualified))
    if isinstance(setting, tuple) and identity != "f" and set(setting) != set(
            primary if identity == "d" else ()) and identity != "i":
        raise UnsupportedColumn(
            f"table {qualified}: key_columns {list(setting)} are not its replica identity, so "
            "its deletes would not carry them: run ALTER TABLE "
            f"{server.quoted(schema, table)} REPLICA IDENTITY FULL (docs/postgres-source.md)")
    uniques = server.unique_keys(conn, oid, replica_index_only=identity == "i")
    if identity == "i":
        primary = ()  # the identity index names the rows an update or delete changes
    key = keys.decide(source, qualified, tuple(specs), primary, uniques, registered)
    return Shape(TableShape(schema, table, tuple(specs), key), tuple(converters), identity,
                 tuple(selects))
