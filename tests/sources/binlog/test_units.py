"""Quick unit tests of the tap's pieces: ref keys, acknowledgements, schema versions, events,
the sources: config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from python_ingest.config import load_settings
from python_ingest.exceptions import ConfigError, IncompatibleSchemaChange
from python_ingest.sources.binlog.columns import make_spec
from python_ingest.sources.binlog.events import TappedTable, changes
from python_ingest.sources.binlog.position import (
    AckWindow,
    BinlogCheckpoint,
    BinlogCheckpointStore,
    BinlogPosition,
    row_refs,
    unpack_ref,
)
from python_ingest.sources.tap.changes import DELETE, INSERT, UPDATE, Envelope
from python_ingest.sources.tap.producer import Encoder
from python_ingest.sources.tap.registry import KeyChoice, Registry, TableShape


def test_ref_keys_increase_across_rows_events_files_and_snapshots() -> None:
    first = row_refs(3, 1000, 5)  # an event ending at byte 1000 with 5 row changes
    second = row_refs(3, 1100, 2)
    snapshot = BinlogPosition("binlog.000003", 1000).ref_key()  # taken right after the first
    next_file = row_refs(4, 300, 1)
    refs = [*first, snapshot, *second, *next_file]
    assert refs == sorted(refs) and len(set(refs)) == len(refs)
    assert unpack_ref(first[0]) == (3, 995)


@pytest.mark.reliability
def test_ref_keys_of_a_later_failover_generation_are_above_every_earlier_one() -> None:
    from python_ingest.exceptions import SluiceError
    from python_ingest.sources.binlog.position import ref_file_index

    old = BinlogPosition("binlog.999999", 4_000_000_000).ref_key()  # generation 0: unchanged
    assert old == row_refs(999999, 4_000_000_001, 1)[0]
    new = [BinlogPosition("binlog.000001", 4).ref_key(1), *row_refs(ref_file_index(1, 1), 300, 2),
           BinlogPosition("binlog.000001", 4).ref_key(2)]
    assert [old, *new] == sorted([old, *new]) and len(set(new)) == len(new)
    with pytest.raises(SluiceError, match="failover"):
        ref_file_index(1 << 20, 1)  # would reach into the next generation
    data = BinlogCheckpoint(BinlogPosition("binlog.000001", 4), "0-2-7", generation=1).to_json()
    assert BinlogCheckpoint.from_json(json.loads(json.dumps(data))).generation == 1
    assert "generation" not in BinlogCheckpoint(BinlogPosition("binlog.000001", 4)).to_json()


@pytest.mark.reliability
def test_gtid_positions_advance_per_domain_and_histories_hold_them() -> None:
    from python_ingest.sources.binlog import gtid

    assert gtid.advance("0-1-9,1-5-3", "0-2-10") == "0-2-10,1-5-3"
    assert gtid.advance(None, "2-1-1") == "2-1-1" and gtid.advance("", "0-1-1") == "0-1-1"
    assert gtid.parse("3E11FA47-71CA-11E1-9E33-C80AA9429562:23") is None  # MySQL's
    state = "0-1-981,0-2-12,1-7-4"  # @@gtid_binlog_state: per domain and server_id
    assert gtid.missing("0-1-981", state) == [] and gtid.missing("0-2-12,1-7-3", state) == []
    assert gtid.missing("0-1-982", state) == ["0-1-982"]  # a replica that lags behind
    assert gtid.missing("0-3-5", state) == ["0-3-5"]  # another history
    assert gtid.missing("0-1-5", "") == ["0-1-5"]


def test_transaction_ends_are_commits_and_ddl_not_savepoints() -> None:
    from python_ingest.sources.binlog.tap import ends_transaction

    assert [ends_transaction(q) for q in (
        "BEGIN", "SAVEPOINT `sp`", "ROLLBACK TO `sp`", "XA END 'x'", "COMMIT", "ROLLBACK",
        "ALTER TABLE t ADD c INT", "XA COMMIT 'x'")] == [
        False, False, False, False, True, True, True, True]


def test_ack_window_only_advances_over_contiguous_acks() -> None:
    window = AckWindow()
    seqs = [window.issue() for _ in range(4)]
    window.ack(seqs[1])
    window.ack(seqs[2])
    assert window.done_below == 0  # message 0 is still in flight
    window.ack(seqs[0])
    assert window.done_below == 3 and window.in_flight == 1
    window.ack(seqs[3], error="broker down")
    assert window.done_below == 3 and window.failures == ["broker down"]


def test_checkpoint_file_is_replaced_atomically_and_locked(tmp_path: Path) -> None:
    store = BinlogCheckpointStore(tmp_path, "shop")
    assert store.load() is None
    store.save(BinlogCheckpoint(BinlogPosition("binlog.000002", 42), "0-1-7", {"a.b": {"pos": 1}}))
    loaded = store.load()
    assert loaded is not None and loaded.position == BinlogPosition("binlog.000002", 42)
    assert loaded.stopped == {"a.b": {"pos": 1}} and loaded.gtid == "0-1-7"
    assert [p.name for p in (tmp_path / "tap").iterdir()] == ["shop.json"]  # no temp left
    assert store.try_lock()
    other = BinlogCheckpointStore(tmp_path, "shop")
    assert not other.try_lock()
    store.release()
    assert other.try_lock()
    other.release()


def _shape(*columns: tuple[str, str], key: tuple[str, ...] = ("id",)) -> TableShape:
    return TableShape("shop", "t", tuple(make_spec(n, k, nullable=n not in key)
                                         for n, k in columns), KeyChoice("primary", key))


def test_registry_adds_versions_for_added_columns_and_refuses_the_rest(tmp_path: Path) -> None:
    registry = Registry(tmp_path / "shop.t")
    v1 = _shape(("id", "long"), ("name", "string"))
    assert registry.register(v1) == 1
    assert registry.register(v1) == 1
    assert registry.register(_shape(("id", "long"), ("name", "string"), ("age", "long"))) == 2
    with pytest.raises(IncompatibleSchemaChange, match="dropped or renamed column"):
        registry.register(_shape(("id", "long"), ("age", "long")))
    with pytest.raises(IncompatibleSchemaChange, match="changed type of name"):
        registry.register(_shape(("id", "long"), ("name", "long"), ("age", "long")))
    with pytest.raises(IncompatibleSchemaChange, match="primary key changed"):
        registry.register(_shape(("id", "long"), ("name", "string"), ("age", "long"),
                                 key=("id", "name")))
    assert sorted(json.loads(p.read_text())["fields"][0]["name"]
                  for p in (tmp_path / "shop.t").glob("*.avsc")) == ["id", "id"]


def test_updates_are_full_images_and_key_changes_split() -> None:
    shape = _shape(("id", "long"), ("name", "string"), ("qty", "long"))
    table = TappedTable(shape, 1, Encoder(1, shape.avro()), "t")
    env = Envelope("mariadb", 1000, "dc1")
    (insert,) = changes(table, INSERT, [{"values": {"id": 1, "name": "a", "qty": 1}}], 2, 500,
                        env)
    assert insert.key == "1" and insert.record["_changed_columns"] is None
    updates = changes(table, UPDATE, [
        {"before_values": {"id": 1, "name": "a", "qty": 1},
         "after_values": {"id": 1, "name": "b", "qty": 1}},
        {"before_values": {"id": 2, "name": "a", "qty": 1},
         "after_values": {"id": 2, "name": "a", "qty": 1}},  # no change: nothing published
        {"before_values": {"id": 3, "name": "a", "qty": 1},
         "after_values": {"id": 4, "name": "a", "qty": 1}},  # key change: delete + insert
    ], 2, 900, env)
    assert [(c.key, c.record["_changed_columns"], c.record["_is_deleted"]) for c in updates] == [
        ("1", None, False), ("3", None, True), ("4", None, False)]  # full images (#9.5)
    refs = [c.record["_ref_key"] for c in updates]
    assert refs == sorted(refs) and refs[-1] < BinlogPosition("b.000002", 900).ref_key()
    (delete,) = changes(table, DELETE, [{"values": {"id": 4, "name": "a", "qty": 1}}], 2, 950,
                        env)
    assert delete.record["_is_deleted"] and delete.record["_data_center"] == "dc1"
    assert table.encoder.encode(delete.record)[:5] == b"\x00\x00\x00\x00\x01"


def _config(tmp_path: Path, source: dict) -> Path:
    path = tmp_path / "sluice.yml"
    path.write_text(json.dumps({"sources": {"shop": source}}))
    return path


@pytest.mark.parametrize(("source", "field"), [
    ({"port": "x"}, "sources.shop.port"),
    ({"kind": "oracle"}, "sources.shop.kind"),
    ({"include": "shop"}, "sources.shop.include"),
    ({"partitions": 0}, "sources.shop.partitions"),
    ({"hots": "a"}, "sources.shop.hots"),
    ({"heartbeat_s": -1}, "sources.shop.heartbeat_s"),
])
def test_source_config_errors_name_the_field(tmp_path: Path, source: dict, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(_config(tmp_path, source), env={})
    assert err.value.field == field


def test_source_config_defaults_and_password_env(tmp_path: Path, monkeypatch) -> None:
    settings = load_settings(_config(tmp_path, {"host": "db", "password_env": "SHOP_PW",
                                                "include": ["shop.*"], "exclude": ["shop.tmp_*"]}),
                             env={})
    source = settings.source("shop")
    assert (source.port, source.topic_base, source.include) == (3306, "shop", ("shop.*",))
    monkeypatch.setenv("SHOP_PW", "s3cret")
    assert source.secret() == "s3cret"
    monkeypatch.delenv("SHOP_PW")
    with pytest.raises(ConfigError, match="SHOP_PW"):
        source.secret()
