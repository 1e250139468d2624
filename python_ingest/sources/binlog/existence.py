"""Which tables exist at the tap's point of the stream, as far as the stream has shown it
(issue #50: DDL followed in stream order, as Debezium follows it).

The server only knows its tables as they are now; the tap reads the binlog behind it, so a
``DROP TABLE IF EXISTS t`` or ``DROP DATABASE IF EXISTS db`` at a position where ``t`` did not
exist (a dump script's first lines, a table dropped earlier in the stream) must drop nothing.
This is derived from the statements themselves, in stream order:

- ``DROP TABLE db.t`` (with or without IF EXISTS): ``db.t`` does not exist after it;
- ``DROP DATABASE db``: no table of ``db`` exists after it (``"db."`` records that);
- ``CREATE TABLE db.t``, ``RENAME ... TO db.t`` and a rows event of ``db.t``: it exists.

A table the stream has said nothing about is *unknown*: it may exist (it was created before the
tap's start). Unknown is the safe answer: a DROP of an unknown table deletes whatever rows the
table's topic holds live (none for a table never published). Only a known absence skips the
drop, so a later drop of a table already dropped never touches its re-created successor's rows
or stops it when retention has trimmed its topic.

The state is immutable (each change makes a new one), so the tap keeps the state of each
transaction end it has not checkpointed yet and saves the one of the checkpoint's position: a
restart (kill -9 included) resumes with the state of the position it resumes at.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class Existence:
    """Known existence of tables: ``"db.t"`` → exists, ``"db."`` → False (database dropped)."""

    def __init__(self, known: Mapping[str, bool] | None = None) -> None:
        self._known: dict[str, bool] = dict(known or {})

    def exists(self, db: str, table: str) -> bool | None:
        """True or False where the stream has shown it, None when unknown."""
        if not self._known:  # the usual case: no drop seen (a rows event asks every time)
            return None
        found = self._known.get(f"{db}.{table}")
        if found is not None:
            return found
        return False if f"{db}." in self._known else None

    def dropped(self, db: str, table: str) -> Existence:
        if f"{db}." in self._known:  # its database was dropped: absent unless created since
            known = dict(self._known)
            known.pop(f"{db}.{table}", None)
            return Existence(known)
        return self._with({f"{db}.{table}": False})

    def dropped_database(self, db: str) -> Existence:
        prefix = f"{db}."
        known = {k: v for k, v in self._known.items() if not k.startswith(prefix)}
        known[prefix] = False
        return Existence(known)

    def created(self, db: str, table: str) -> Existence:
        """``db.t`` exists from here on. Only recorded while its database is known dropped
        (unknown already counts as possibly existing): the map stays small."""
        if self.exists(db, table) is None or self.exists(db, table) is True:
            return self
        if f"{db}." in self._known:
            return self._with({f"{db}.{table}": True})
        known = dict(self._known)
        known.pop(f"{db}.{table}", None)
        return Existence(known)

    def _with(self, changes: dict[str, bool]) -> Existence:
        return Existence({**self._known, **changes})

    def to_json(self) -> dict[str, Any]:
        return dict(sorted(self._known.items()))

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Existence:
        return cls({str(k): bool(v) for k, v in (data or {}).items()})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Existence) and other._known == self._known

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._known.items())))

    def __repr__(self) -> str:
        return f"Existence({self._known})"
