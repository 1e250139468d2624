"""Which columns identify a tapped table's rows, and the identity of rows of tables without.

The choice, in this order (docs/binlog-tap.md, "Keys"):

1. the source's ``key_columns`` entry for the table, when there is one (as Debezium's
   ``message.key.columns``, it wins over what the table has): a list of columns, ``row`` or
   ``changelog``;
2. the primary key;
3. a UNIQUE index whose columns are all NOT NULL (and not prefixes): the first in the server's
   index order, which is the one the server itself treats as the primary key of a table without
   one (InnoDB clusters by it, the binlog marks its columns as the key);
4. else a full-row identity: identical rows are distinct lake rows (a multiset).

Full-row identity: ``sluice_row_id`` is ``<digest>#<n>``, the digest of the row's values and the
n-th identical copy. The tap counts the copies per digest (``RowCounts``, saved with its
checkpoint): an insert adds copy n+1, a delete removes copy n, so a delete removes exactly one
of several identical rows.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from collections import Counter
from typing import Any

from python_ingest.changelog.schema import KEY_SEPARATOR
from python_ingest.config import SourceConfig
from python_ingest.exceptions import ConfigError
from python_ingest.sources.tap.checkpoints import Position
from python_ingest.sources.tap.columns import NATURAL_KEY_KINDS, ColumnSpec, canonical
from python_ingest.sources.tap.registry import (
    CHANGELOG,
    COLUMNS,
    PRIMARY,
    ROW,
    UNIQUE,
    KeyChoice,
    registered_key,
)

MODES = (ROW, CHANGELOG)
# Key columns whose text may hold the separator of a composite row key (issue #9.7).
TEXT_KINDS = ("string", "enum", "set", "json")
JOINED = ("; its columns joined with '|', as registered before such keys became "
          "sluice_row_id (a value holding '|' stops the table)")


def check_setting(source: SourceConfig | None) -> dict[str, Any]:
    """The source's ``key_columns`` (``{db.table glob: [columns] | row | changelog}``), checked;
    raises ConfigError naming the entry that is wrong."""
    setting = dict(getattr(source, "key_columns", None) or {})
    for pattern, value in setting.items():
        where = f"sources.{getattr(source, 'name', '?')}.key_columns.{pattern}"
        if not isinstance(pattern, str) or "." not in pattern:
            raise ConfigError(where, "expected a 'db.table' name (or glob) as the key")
        if isinstance(value, str) and value in MODES:
            continue
        columns = [value] if isinstance(value, str) else value
        if not isinstance(columns, list) or not columns or not all(
                isinstance(c, str) and c for c in columns):
            raise ConfigError(where, f"expected a list of column names, 'row' or 'changelog', "
                              f"got {value!r}")
    return setting


def configured(source: SourceConfig | None, qualified: str) -> str | tuple[str, ...] | None:
    """The ``key_columns`` entry that applies to ``db.table`` (the first matching glob)."""
    for pattern, value in check_setting(source).items():
        if pattern == qualified or fnmatch.fnmatchcase(qualified, pattern):
            return value if value in MODES else tuple([value] if isinstance(value, str)
                                                      else value)
    return None


def decide(source: SourceConfig | None, qualified: str, specs: tuple[ColumnSpec, ...],
           primary: tuple[str, ...], uniques: list[tuple[str, tuple[str, ...]]],
           registered: dict[str, Any] | None = None) -> KeyChoice:
    """The key of ``db.table`` (see the module doc). ``uniques``: (index, columns) of its
    UNIQUE indexes over NOT NULL columns, in the server's index order. ``registered``: the
    table's latest registered schema: a composite key it registered joined with '|' (before
    issue #9.7) stays so (no silent re-keying; an ambiguous value stops the table)."""
    by_name = {s.name: s for s in specs}
    setting = configured(source, qualified)
    name = source.name if source is not None else "<source>"
    hint = (f"set sources.{name}.key_columns.{qualified} to a list of columns, or to "
            "'changelog' for an append-only table of every change")
    if setting == ROW:
        return KeyChoice(ROW, why=f"key_columns of source {name} asks for a full-row identity")
    if setting == CHANGELOG:
        return KeyChoice(CHANGELOG, why=f"key_columns of source {name} asks for an append-only "
                                        "changelog")
    index = None
    if isinstance(setting, tuple):
        missing = [c for c in setting if c not in by_name]
        if missing:
            raise ConfigError(f"sources.{name}.key_columns.{qualified}",
                              f"{qualified} has no column {', '.join(missing)}")
        kind, columns = COLUMNS, setting
        why = f"key_columns of source {name} names them"
    elif primary:
        kind, columns, why = PRIMARY, primary, "the table's primary key"
    elif uniques:
        index, columns = uniques[0]
        kind = UNIQUE
        why = (f"no primary key; UNIQUE index {index} has only NOT NULL columns (the first "
               "such index, which the server itself uses as the primary key)")
    else:
        return KeyChoice(ROW, why="no primary key and no UNIQUE index over NOT NULL columns: "
                                  "a full-row identity, where two identical rows are two lake "
                                  f"rows and a delete removes one; {hint}")
    unfit = [c for c in columns if by_name[c].kind not in NATURAL_KEY_KINDS
             or by_name[c].nullable]
    if unfit:
        why += (f"; keyed by their text in sluice_row_id, as {', '.join(unfit)} cannot be a "
                "row key as is (bytes, floating point or nullable)")
    texts = [c for c in columns if by_name[c].kind in TEXT_KINDS] if len(columns) > 1 else []
    if texts and not unfit:
        joined = KeyChoice(kind, tuple(columns), False, index)
        if registered is not None and registered_key(registered) == joined:
            return KeyChoice(kind, tuple(columns), False, index, why + JOINED)
        why += (f"; keyed by their text in sluice_row_id (a JSON list), as {', '.join(texts)} "
                f"may hold '{KEY_SEPARATOR}', which joins the columns of a row key")
    return KeyChoice(kind, tuple(columns), bool(unfit or texts), index, why)


def row_digest(specs: tuple[ColumnSpec, ...], values: dict[str, Any]) -> str:
    """A digest of a row's values (its non-null columns by name, canonical text)."""
    items = [[s.name, canonical(s, values[s.name])] for s in specs
             if values.get(s.name) is not None]
    return hashlib.blake2b(json.dumps(items, ensure_ascii=False).encode(),
                           digest_size=12).hexdigest()


class RowCounts:
    """Copies per row digest of the full-row-identity tables, as of the tap's position.

    ``live`` moves with every row change; ``saved`` is the state at the saved checkpoint: the
    changes of each transaction (``take_delta``) are applied to it once the transaction's
    events are acknowledged. ``since``: a bootstrap's snapshot position per table; row changes
    at or before it are in the snapshot already and are skipped.
    """

    def __init__(self, saved: dict[str, dict[str, Any]] | None = None) -> None:
        saved = saved or {}
        self.saved = {t: {d: int(n) for d, n in (s.get("counts") or {}).items()}
                      for t, s in saved.items()}
        self.since = {t: Position(s["since"]["file"], int(s["since"]["pos"]))
                      for t, s in saved.items() if s.get("since")}
        self.live = {t: dict(c) for t, c in self.saved.items()}
        self._delta: dict[str, Counter[str]] = {}

    def add(self, table: str, digest: str) -> int:
        counts = self.live.setdefault(table, {})
        n = counts.get(digest, 0) + 1
        counts[digest] = n
        self._delta.setdefault(table, Counter())[digest] += 1
        return n

    def remove(self, table: str, digest: str) -> int:
        counts = self.live.setdefault(table, {})
        n = counts.get(digest, 0)
        if n <= 0:
            return 1  # a row the tap never saw (before its start): its first copy
        if n == 1:
            del counts[digest]
        else:
            counts[digest] = n - 1
        self._delta.setdefault(table, Counter())[digest] -= 1
        return n

    def clear(self, table: str) -> None:
        """A TRUNCATE of the table: every copy is gone."""
        for digest, n in self.live.pop(table, {}).items():
            self._delta.setdefault(table, Counter())[digest] -= n

    def skip(self, table: str, position: Position) -> bool:
        """Whether a row change ending at ``position`` is in the table's bootstrap snapshot."""
        since = self.since.get(table)
        return since is not None and position <= since

    def take_delta(self) -> dict[str, Counter[str]]:
        delta, self._delta = self._delta, {}
        return delta

    def apply(self, delta: dict[str, Counter[str]]) -> None:
        for table, changes in delta.items():
            counts = self.saved.setdefault(table, {})
            for digest, change in changes.items():
                n = counts.get(digest, 0) + change
                if n > 0:
                    counts[digest] = n
                else:
                    counts.pop(digest, None)

    def to_json(self, position: Position) -> dict[str, dict[str, Any]]:
        """The saved state for a checkpoint at ``position`` (snapshot marks it passed drop)."""
        tables = set(self.saved) | {t for t, s in self.since.items() if s > position}
        out: dict[str, dict[str, Any]] = {}
        for table in sorted(tables):
            since = self.since.get(table)
            out[table] = {"since": {"file": since.file, "pos": since.pos}
                          if since is not None and since > position else None,
                          "counts": dict(sorted(self.saved.get(table, {}).items()))}
        return out

    def reset(self, table: str, counts: dict[str, int], since: Position) -> None:
        """A bootstrap's snapshot replaces the table's counts (the tap is not running)."""
        self.saved[table] = dict(counts)
        self.live[table] = dict(counts)
        self.since[table] = since
