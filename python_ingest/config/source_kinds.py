"""Each source kind's own settings (``sources:`` in sluice.yml), apart from the ones every kind
has (config/sources.py): MariaDB/MySQL's binlog settings and PostgreSQL's slot settings. A
setting of one kind in a source of another is a config error naming the setting, the source
and its kind, before anything connects.

``SECTIONS`` maps each ``kind:`` a user may write to its section; a new kind adds its options
class and one line (and its parts' line in sources/tap/kinds.py, docs/write-a-source.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from python_ingest.config.checks import NAME, choice, positive_int
from python_ingest.exceptions import ConfigError

START_FROM = ("current", "earliest")


@dataclass(frozen=True)
class SourceOptions:
    """A kind's own settings; ``KEYS`` are the sluice.yml keys only that kind accepts."""

    KEYS: ClassVar[tuple[str, ...]] = ()


@dataclass(frozen=True)
class BinlogOptions(SourceOptions):
    """MariaDB and MySQL (docs/binlog-tap.md): the tap's replica id and, without a checkpoint,
    where in the binlog it starts."""

    KEYS: ClassVar[tuple[str, ...]] = ("server_id", "start_from")

    server_id: int = 4201
    start_from: str = "current"  # START_FROM


@dataclass(frozen=True)
class PostgresOptions(SourceOptions):
    """PostgreSQL (docs/postgres-source.md): the database, its slot and publication (as named
    in the config, None: sluice's own ``sluice_<source>``, and the names read), and how the
    slot is read and watched."""

    KEYS: ClassVar[tuple[str, ...]] = ("database", "slot", "publication",
                                       "slot_lag_warn_bytes", "streaming")

    database: str = "postgres"
    slot: str | None = None
    publication: str | None = None
    slot_name: str = ""  # the replication slot the tap reads (created when missing)
    publication_name: str = ""  # the publication of the tapped tables (created when missing)
    slot_lag_warn_bytes: int = 1 << 30  # `sluice status` warns past this much retained WAL
    streaming: bool = False  # pgoutput protocol 2: large transactions streamed before commit


@dataclass(frozen=True)
class KindSection:
    """What sluice.yml accepts for one ``kind:``: whose settings (``title``), its default
    port, and the parser of its own keys (``(source name, raw mapping, where)``)."""

    title: str
    port: int
    options: type[SourceOptions]
    parse: Callable[[str, Mapping[str, Any], str], SourceOptions]


def parse_binlog(name: str, raw: Mapping[str, Any], where: str) -> BinlogOptions:
    d = BinlogOptions
    return BinlogOptions(
        server_id=positive_int(raw.get("server_id", d.server_id), f"{where}.server_id"),
        start_from=choice(raw.get("start_from", d.start_from), START_FROM,
                          f"{where}.start_from"))


def parse_postgres(name: str, raw: Mapping[str, Any], where: str) -> PostgresOptions:
    d = PostgresOptions
    for text in ("database", "slot", "publication"):
        if text in raw and not isinstance(raw[text], str):
            raise ConfigError(f"{where}.{text}", f"expected text, got {raw[text]!r}")
    slot = identifier(raw.get("slot"), f"{where}.slot")
    publication = identifier(raw.get("publication"), f"{where}.publication")
    streaming = raw.get("streaming", d.streaming)
    if not isinstance(streaming, bool):
        raise ConfigError(f"{where}.streaming", f"expected true or false, got {streaming!r}")
    return PostgresOptions(
        database=raw.get("database", d.database),
        slot=slot,
        publication=publication,
        slot_name=slot or f"sluice_{name}",
        publication_name=publication or f"sluice_{name}",
        slot_lag_warn_bytes=positive_int(raw.get("slot_lag_warn_bytes", d.slot_lag_warn_bytes),
                                         f"{where}.slot_lag_warn_bytes"),
        streaming=streaming)


def identifier(value: Any, field_name: str) -> str | None:
    """A PostgreSQL slot or publication name: lowercase letters, digits, underscores."""
    if value is None:
        return None
    if not NAME.match(value) or len(value) > 63:
        raise ConfigError(field_name, f"expected a name of lowercase letters, digits and "
                          f"underscores (at most 63), got {value!r}")
    return str(value)


BINLOG = KindSection("MariaDB/MySQL", 3306, BinlogOptions, parse_binlog)
SECTIONS: dict[str, KindSection] = {
    "mariadb": BINLOG,
    "mysql": BINLOG,
    "postgres": KindSection("PostgreSQL", 5432, PostgresOptions, parse_postgres),
}


def check_kind_keys(raw: Mapping[str, Any], common: set[str], name: str, kind: str,
                    where: str) -> None:
    """Refuse a setting of another kind, naming it, the source and its kind."""
    own = SECTIONS[kind].options.KEYS
    for key in sorted(set(raw) - common - set(own)):
        owners = sorted({s.title for k, s in SECTIONS.items() if key in s.options.KEYS})
        if owners:
            raise ConfigError(f"{where}.{key}", f"{key} is a {' and '.join(owners)} setting, and "
                              f"source {name} is kind {kind}",
                              f"remove it; kind {kind}'s own settings: "
                              f"{', '.join(own) or 'none'}")
