"""A job's tables read without a JVM: hudi-rs (PyPI ``hudi``, Apache Hudi's own Rust reader)
for Hudi, pyiceberg for Iceberg, each table as a pyarrow Table of its current snapshot.

What only reads a few rows (``sluice changes``, the ``sluice errors`` listing) answers in about
a second this way, where starting Spark takes several. Both readers merge what a
merge-on-read table holds apart (Hudi's log files, Iceberg's position deletes), as Spark's
snapshot read does. Spark stays the fallback: ``NativeLake.of`` raises ``NativeUnavailable``
(and the caller reads through Spark) for a warehouse that is not a local folder (an object
store's credentials are Spark's conf), a catalog other than ``hadoop`` or ``jdbc``, or with
``SLUICE_NATIVE_READS=off``; a table either reader cannot read raises it too.

Tables sit where sluice's session puts them: ``<warehouse>/<namespace>/<table>`` (Hudi, and
Iceberg's Hadoop catalog, whose current metadata file ``version-hint.text`` names); a JDBC
catalog's row for the table names its metadata file (Iceberg's ``iceberg_tables``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from python_ingest.exceptions import SluiceError

if TYPE_CHECKING:
    import pyarrow as pa

    from python_ingest.config import CatalogConfig, JobConfig, Settings

log = logging.getLogger(__name__)

SWITCH_ENV = "SLUICE_NATIVE_READS"  # "off": every read through Spark


class NativeUnavailable(SluiceError):
    """The JVM-free readers cannot answer here: read through Spark instead (the reason says
    why, for a debug line)."""


@dataclass(frozen=True)
class NativeLake:
    """The tables of one format in one warehouse, as the JVM-free readers see them."""

    warehouse: Path
    table_format: str  # hudi | iceberg
    catalog: CatalogConfig

    @classmethod
    def of(cls, settings: Settings, job: JobConfig) -> NativeLake:
        """The lake ``job``'s tables are in; raises NativeUnavailable (use Spark) when the
        readers cannot serve it."""
        if os.environ.get(SWITCH_ENV, "").strip().lower() in ("off", "0", "false", "no"):
            raise NativeUnavailable(f"{SWITCH_ENV} is off")
        cat = settings.catalog
        if "://" in cat.warehouse:
            raise NativeUnavailable(f"the warehouse {cat.warehouse} is not a local folder")
        table_format = settings.format_of(job)
        if table_format not in ("hudi", "iceberg"):  # a format without a reader here
            raise NativeUnavailable(f"no reader without a JVM for {table_format}")
        if table_format == "iceberg" and cat.type not in ("hadoop", "jdbc"):
            raise NativeUnavailable(f"an Iceberg catalog of type {cat.type}")
        try:  # the reader is installed (requirements.lock), but keep Spark if it is not
            if table_format == "hudi":
                import hudi  # noqa: F401
            else:
                import pyiceberg  # noqa: F401
        except ImportError as exc:
            raise NativeUnavailable(f"no reader for {table_format}: {exc}") from None
        return cls(settings.path(cat.warehouse), table_format, cat)

    def location(self, table: str) -> Path:
        """``<warehouse>/<namespace>/<table>`` for ``namespace.table``."""
        namespace, _, name = table.partition(".")
        return self.warehouse / namespace / name

    def exists(self, table: str) -> bool:
        """Whether ``table`` exists (has a committed state to read)."""
        if self.table_format == "hudi":
            return (self.location(table) / ".hoodie" / "hoodie.properties").is_file()
        return self._iceberg_metadata(table) is not None

    def read(self, table: str, columns: list[str] | None = None) -> pa.Table:
        """The table's current rows (only ``columns``, if given, in that order); raises
        NativeUnavailable when the reader fails on it."""
        try:
            if self.table_format == "hudi":
                return self._read_hudi(table, columns)
            return self._read_iceberg(table, columns)
        except NativeUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 (any reader failure: Spark reads it instead)
            raise NativeUnavailable(f"{table}: {type(exc).__name__}: {exc}") from exc

    def column_names(self, table: str) -> list[str]:
        """The table's columns (Hudi's own ``_hoodie_*`` ones left out)."""
        if self.table_format == "hudi":
            from hudi import HudiTable

            return list(HudiTable(str(self.location(table))).get_schema().names)
        return [f.name for f in self._iceberg_table(table).schema().fields]

    def _read_hudi(self, table: str, columns: list[str] | None) -> pa.Table:
        import pyarrow as pa
        from hudi import HudiReadOptions, HudiTable

        hudi_table = HudiTable(str(self.location(table)))
        batches = hudi_table.read(HudiReadOptions(projection=columns))
        if not batches:
            schema = hudi_table.get_schema()
            if columns is not None:
                schema = pa.schema([schema.field(c) for c in columns])
            return schema.empty_table()
        found = pa.Table.from_batches(batches)
        if columns is None:  # as column_names: Hudi's meta columns left out
            columns = [c for c in found.column_names if not c.startswith("_hoodie_")]
        return found.select(columns)

    def _read_iceberg(self, table: str, columns: list[str] | None) -> pa.Table:
        scan = self._iceberg_table(table).scan(
            selected_fields=tuple(columns) if columns is not None else ("*",))
        return scan.to_arrow()

    def _iceberg_table(self, table: str) -> Any:
        from pyiceberg.table import StaticTable

        metadata = self._iceberg_metadata(table)
        if metadata is None:
            raise NativeUnavailable(f"no Iceberg table {table}")
        return StaticTable.from_metadata(metadata)

    def _iceberg_metadata(self, table: str) -> str | None:
        """The table's current metadata file (None: no such table)."""
        if self.catalog.type == "jdbc":
            return self._jdbc_metadata(table)
        folder = self.location(table) / "metadata"
        hint = folder / "version-hint.text"
        if hint.is_file():
            version = hint.read_text().strip()
            for name in (f"v{version}.metadata.json", f"v{version}.gz.metadata.json"):
                if (folder / name).is_file():
                    return str(folder / name)
        if not folder.is_dir():
            return None
        # no hint (a writer that died between the two files): the newest version, as
        # Iceberg's Hadoop catalog then finds it
        versions = [(int(p.name[1:].split(".")[0]), p) for p in folder.glob("v*.metadata.json")
                    if p.name[1:].split(".")[0].isdigit()]
        return str(max(versions)[1]) if versions else None

    def _jdbc_metadata(self, table: str) -> str | None:
        import psycopg

        namespace, _, name = table.partition(".")
        uri = str(self.catalog.uri).removeprefix("jdbc:")
        options: dict[str, Any] = {"connect_timeout": 10}
        if self.catalog.user:
            options["user"] = self.catalog.user
        password = self.catalog.reveal_password()
        if password is not None:
            options["password"] = password
        options.update(self.catalog.jdbc_ssl())  # TLS, as Spark's connection has it
        try:
            with psycopg.connect(uri, **options) as conn:
                found = conn.execute(
                    "select metadata_location from iceberg_tables where catalog_name = %s "
                    "and table_namespace = %s and table_name = %s",
                    (self.catalog.name, namespace, name)).fetchone()
        except psycopg.Error as exc:
            raise NativeUnavailable(f"the JDBC catalog: {exc}") from exc
        return None if found is None else str(found[0])
