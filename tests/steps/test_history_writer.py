"""The history writer's state held between batches (steps/history/writer.py), without Spark:
a batch with the process's state in hand reads neither the checkpoint nor the stored
versions, and any commit not the process's own (a table service, another process) makes the
next batch read the table again, so what it folds against is always the table's rows."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace
from typing import Any

import pytest

from python_ingest.steps.history import writer
from python_ingest.steps.history.fold import Options
from python_ingest.steps.history.rules import EXTRA_COLUMNS

pytestmark = pytest.mark.history
PAYLOAD = (("_row_key", "string"), ("_ref_key", "bigint"), ("_is_deleted", "boolean"),
           ("_event_ts", "timestamp"), ("_source", "string"), ("_data_center", "string"),
           ("_batch_id", "bigint"), ("v", "string"))


class _Table:
    """A history table: its rows by (row key, ref key), its position, its checkpoint."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, int], dict[str, Any]] = {}
        self.commits = 0
        self.checkpoint = 0
        self.reads: list[str] = []

    def commit(self, outcome: Any, batch_id: int) -> None:
        for record in outcome.remove:
            del self.rows[record]
        for row in outcome.write:
            self.rows[(row["_row_key"], row["_ref_key"])] = dict(row)
        self.commits, self.checkpoint = self.commits + 1, batch_id


class _Frame:
    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def collect(self) -> list[dict[str, Any]]:
        return self.rows


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> _Table:
    found = _Table()
    shape = writer.Shape((*PAYLOAD, *EXTRA_COLUMNS), ("v",))
    batch_of: dict[str, int] = {}

    def commit(spark: Any, history: str, shape_: Any, outcome: Any, batch_id: int) -> _Frame:
        found.commit(outcome, batch_of["now"])
        return _Frame([{**r, "_drop": False} for r in outcome.write])

    def committing(spark: Any, properties: dict[str, str], action: Any) -> Any:
        batch_of["now"] = int(next(iter(properties.values())))
        return action()

    def read_all(spark: Any, history: str) -> dict[str, list[dict[str, Any]]]:
        found.reads.append("all")
        out: dict[str, list[dict[str, Any]]] = {}
        for (key, _), row in found.rows.items():
            out.setdefault(key, []).append(dict(row))
        return out

    def checkpoint(spark: Any, history: str, step: str) -> int:
        found.reads.append("checkpoint")
        return found.checkpoint

    class _Spark:
        def table(self, name: str) -> Any:
            return type("T", (), {"schema": []})()

    monkeypatch.setattr(writer, "position", lambda spark, history: str(found.commits))
    monkeypatch.setattr(writer, "step_checkpoint", checkpoint)
    monkeypatch.setattr(writer, "shape", lambda spark, lake, incoming=None, added=(): shape)
    monkeypatch.setattr(writer, "ensure", lambda spark, history, shape_: None)
    monkeypatch.setattr(writer, "_read_all", read_all)
    monkeypatch.setattr(writer, "_commit", commit)
    monkeypatch.setattr(writer, "committing", committing)
    monkeypatch.setattr(writer, "check_held", lambda job: None)
    monkeypatch.setattr(writer, "_held", {})
    found.spark = _Spark()  # type: ignore[attr-defined]
    return found


def _change(ref: int, value: str, key: str = "k") -> dict[str, Any]:
    return {"_row_key": key, "_ref_key": ref, "_is_deleted": False, "_force_update": False,
            "_changed_columns": None, "_event_ts": dt.datetime(2026, 3, 1, 8, ref),
            "_source": "s", "_data_center": "dc1", "_batch_id": 0, "v": value}


def _write(table: _Table, batch_id: int, *changes: dict[str, Any]) -> int:
    tables = SimpleNamespace(history="lake.j__history", lake="lake.j", job="j")
    return writer.write_batch(table.spark, tables, Options("new_record"),  # type: ignore
                              batch_id, list(changes), "valid")


@pytest.mark.reliability
def test_held_versions_are_used_until_another_commit_then_the_table_is_read_again(
        table: _Table) -> None:
    assert _write(table, 1, _change(1, "a")) == 1
    assert table.reads == ["checkpoint", "all"]  # a new process: the table read once
    assert _write(table, 2, _change(2, "b")) == 2  # the version before it closed too
    assert table.reads == ["checkpoint", "all"]  # its own last commit: nothing read
    # another writer's commit (a table service, another process): it changed a version
    table.rows[("k", 2)]["v"] = "B"
    table.commits += 1
    assert _write(table, 3, _change(3, "c")) == 2
    assert table.reads == ["checkpoint", "all"] * 2
    assert table.rows[("k", 2)]["v"] == "B"  # folded against the table's rows, not memory
    assert [r["_closed_ref_key"] for _, r in sorted(table.rows.items())] == [2, 3, None]
    # a batch committed before (a rerun after a kill between the history and the lake)
    assert _write(table, 3, _change(3, "c")) == 0
    assert table.commits == 4


def test_past_the_total_the_least_recently_written_histories_let_their_versions_go(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """SLUICE_HISTORY_HELD_TOTAL: the oldest histories but the one just written drop their
    versions (read by key from then on) until the rest fit; one already dropped stays so."""
    shape = writer.Shape(PAYLOAD, ("v",))
    held = {name: writer._Held("p", 1, shape, {"k": [{}]} if count else None, count, used)
            for name, count, used in (("old", 4, 1.0), ("dropped", 0, 0.5), ("mid", 4, 2.0),
                                      ("new", 4, 3.0))}
    monkeypatch.setattr(writer, "_held", held)
    monkeypatch.setattr(writer, "_many", set())
    monkeypatch.setattr(writer, "HELD_TOTAL", 8)
    writer._evict(keep="old")  # the one a batch just wrote stays, whatever its age
    assert [n for n, h in held.items() if h.versions is not None] == ["old", "new"]
    assert held["mid"].count == 0 and writer._many == {"mid"}
