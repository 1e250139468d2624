"""Row keys are never empty (issue #50.2): ``changelog/keys.py``'s encoding is total and
injective, keeps every key that could land before as it was, and is the one rule of the
ingestion decoder (``_row_key``) and of both taps' Kafka keys, which equal the ``_row_key`` the
decoder makes of their events. Hudi refuses an empty record key; the whole way through a Hudi
lake is in tests/steps/test_reliability_row_keys.py."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from python_ingest.changelog.decode import Decoder
from python_ingest.changelog.keys import EMPTY_KEY, row_key_column, row_key_text
from python_ingest.changelog.schema import ChangelogSchema
from python_ingest.config import JobConfig, Settings
from python_ingest.sources.binlog.columns import ROW_ID, make_spec
from python_ingest.sources.binlog.events import INSERT, Envelope, TappedTable, changes
from python_ingest.sources.tap.producer import Encoder
from python_ingest.sources.tap.registry import COLUMNS, PRIMARY, KeyChoice, TableShape

pytestmark = pytest.mark.reliability

M = EMPTY_KEY
# texts that could be keys: empty, blank, the marker alone, repeated, leading and trailing,
# the composite separator, JSON-looking text, and ordinary ones
TEXTS = ["", " ", "  ", "\t", M, M * 2, M * 3, M + " ", " " + M, M + "a", "a" + M, "|", "||",
         "a|b", '[""]', "[null]", "null", "\\N", "x", "日本", "0"]


def test_the_encoding_is_total_injective_never_empty_and_keeps_what_landed_before() -> None:
    encoded = [row_key_text(t) for t in TEXTS]
    assert all(isinstance(k, str) and k for k in encoded)  # total, never empty
    assert len(set(encoded)) == len(TEXTS)  # injective
    assert row_key_text("") == M and row_key_text(M) == M * 2 and row_key_text(M * 2) == M * 3
    # every text with a character other than the marker is itself: what Hudi took before
    # lands under the same key (a lake holds them)
    for text in TEXTS:
        if text.strip(M):
            assert row_key_text(text) == text, text
    # injective against every text, not only these: an encoded key that is not all-marker
    # is its own text; an all-marker one is one longer than its text
    for text, key in zip(TEXTS, encoded, strict=True):
        assert (key == text) == bool(text.strip(M))
        assert key.strip(M) or key == text + M


def test_the_column_wise_encoding_is_the_same_and_keeps_nulls() -> None:
    column = pa.array([*TEXTS, None], pa.string())
    assert row_key_column(column).to_pylist() == [*(row_key_text(t) for t in TEXTS), None]
    plain = pa.array(["a", "b"], pa.string())
    assert row_key_column(plain) is plain  # nothing to change: the column as it is


SCHEMA = {"type": "record", "name": "keys", "fields": [
    {"name": "a", "type": ["null", "string"], "default": None},
    {"name": "b", "type": ["null", "string"], "default": None},
    {"name": "c", "type": ["null", "bytes"], "default": None},
    {"name": "n", "type": ["null", "long"], "default": None},
    {"name": "_ref_key", "type": "long"},
]}


def _decoder(tmp_path: Path, row_key: tuple[str, ...], **job: Any) -> Decoder:
    path = tmp_path / "keys.avsc"
    path.write_text(json.dumps(SCHEMA))
    config = JobConfig(name="keys", topic="t", schema=str(path), row_key=row_key, **job)
    return Decoder(ChangelogSchema.load(config, tmp_path))


def _keys(decoder: Decoder, records: list[dict[str, Any]]) -> tuple[list[str | None],
                                                                   dict[int, str]]:
    batch, bad = decoder.to_arrow([{"_ref_key": i, **r} for i, r in enumerate(records)])
    return batch.column("_row_key").to_pylist(), bad


@pytest.mark.parametrize("encoding", ["json", "joined"])
def test_single_column_keys_empty_blank_and_marked_stay_distinct(
        tmp_path: Path, encoding: str) -> None:
    keys, bad = _keys(_decoder(tmp_path, ("a",), row_key_encoding=encoding),
                      [{"a": t} for t in TEXTS])
    assert not bad and keys == [row_key_text(t) for t in TEXTS]
    assert keys[0] == M and keys[1] == " "  # '' was the key Hudi refused; ' ' stays itself
    # bytes: '' (json: its hex is empty) or the marker's own bytes (joined: its UTF-8 text)
    keys, bad = _keys(_decoder(tmp_path, ("c",), row_key_encoding=encoding),
                      [{"c": b""}, {"c": M.encode()}, {"c": b" "}])
    assert not bad
    assert keys == ([M, M.encode().hex(), "20"] if encoding == "json" else [M, M * 2, " "])


def test_composite_keys_with_empty_blank_null_and_separator_parts(tmp_path: Path) -> None:
    pairs = [("", ""), ("", " "), (" ", ""), ("|", ""), ("", "|"), ("|", "|"), (M, ""),
             ("", M), (M, M), ("a|b", "c"), ("a", "b|c"), ("[]", ""), ("", "null")]
    keys, bad = _keys(_decoder(tmp_path, ("a", "b")), [{"a": a, "b": b} for a, b in pairs])
    assert not bad and all(keys) and len(set(keys)) == len(pairs)
    # as before: the JSON list of the texts (a lake holds them); ("", "") was never empty
    assert keys == [json.dumps([a, b], ensure_ascii=False) for a, b in pairs]
    # a number and a text: their JSON list, as before
    keys, bad = _keys(_decoder(tmp_path, ("n", "a")), [{"n": 1, "a": ""}, {"n": 1, "a": " "}])
    assert not bad and keys == ['["1", ""]', '["1", " "]']
    # a NULL part is never a key: an error row naming the column, whether the other part is
    # '' or ' ' (NULL, '' and ' ' never share a key)
    for encoding in ("json", "joined"):
        records = [{"a": None, "b": ""}, {"a": None, "b": " "}, {"a": "", "b": None},
                   {"a": "", "b": ""}]
        keys, bad = _keys(_decoder(tmp_path, ("a", "b"), row_key_encoding=encoding), records)
        assert set(bad) == {0, 1, 2}, bad
        assert "'a' is null" in bad[0] and "'b' is null" in bad[2]
        assert keys[3] == ('["", ""]' if encoding == "json" else "|")


@pytest.mark.parametrize(("project", "own", "keys"), [
    ("hudi", None, [M, " ", M * 2]), ("iceberg", "hudi", [M, " ", M * 2]),
    ("iceberg", None, ["", " ", M]), ("hudi", "iceberg", ["", " ", M])])
def test_iceberg_jobs_keep_their_keys_as_they_are(
        tmp_path: Path, project: str, own: str | None, keys: list[str]) -> None:
    """Iceberg lakes took '' keys (and hold them): their jobs' keys stay the texts as before,
    never re-keyed; Hudi jobs get the rule. The job's own table_format wins."""
    path = tmp_path / "keys.avsc"
    path.write_text(json.dumps(SCHEMA))
    job = JobConfig(name="keys", topic="t", schema=str(path), row_key=("a",), table_format=own)
    settings = Settings(root=tmp_path, jobs={"keys": job}, table_format=project)
    decoder = Decoder(ChangelogSchema.of(settings, job))
    assert _keys(decoder, [{"a": ""}, {"a": " "}, {"a": M}]) == (keys, {})


# ---- the taps' Kafka keys: equal to the _row_key the decoder makes of their events ---------

def _tapped(tmp_path: Path, specs: tuple[Any, ...], key: KeyChoice
            ) -> tuple[TappedTable, Decoder]:
    shape = TableShape("d", "t", specs, key)
    path = tmp_path / "1.avsc"
    path.write_text(json.dumps(shape.avro()))
    row_key = shape.primary_key
    config = JobConfig(name="d__t", topic="t", schema=str(path), row_key=row_key,
                       value_format="confluent-avro", schema_ids={1: str(path)},
                       row_key_encoding="joined" if len(row_key) > 1 else "json")
    return (TappedTable(shape, 1, Encoder(1, shape.avro()), "t"),
            Decoder(ChangelogSchema.load(config, tmp_path)))


def _published(table: TappedTable, decoder: Decoder, rows: list[dict[str, Any]]
               ) -> list[tuple[str, str, dict[str, Any]]]:
    """(Kafka key, the decoder's _row_key, the event) of inserting ``rows``."""
    out = []
    for change in changes(table, INSERT, [{"values": r} for r in rows], 1, 100,
                          Envelope("mariadb", 0, None)):
        assert change.key is not None and not change.problems, change.problems
        row = decoder.decode(table.encoder.encode(dict(change.record)))
        out.append((change.key, row["_row_key"], row))
    return out


def test_the_binlog_taps_key_of_an_empty_text_is_the_decoders_row_key(tmp_path: Path) -> None:
    table, decoder = _tapped(tmp_path, (make_spec("k", "string", nullable=False),
                                        make_spec("v", "long")), KeyChoice(PRIMARY, ("k",)))
    texts = ["", " ", M, "x", "a|b"]
    published = _published(table, decoder, [{"k": t, "v": 1} for t in texts])
    assert [key for key, _, _ in published] == [M, " ", M * 2, "x", "a|b"]
    assert all(key == row_key for key, row_key, _ in published)
    assert [row["k"] for _, _, row in published] == texts  # the column lands as it is


def test_the_binlog_taps_synthetic_keys_keep_their_column_and_never_are_empty(
        tmp_path: Path) -> None:
    # an empty VARBINARY primary key: sluice_row_id is its hex, '' (the column as before)
    table, decoder = _tapped(tmp_path, (make_spec("k", "bytes", nullable=False),),
                             KeyChoice(PRIMARY, ("k",), synthetic=True))
    published = _published(table, decoder, [{"k": b""}, {"k": b"\x00"}])
    assert [(key, row[ROW_ID]) for key, _, row in published] == [(M, ""), ("00", "00")]
    assert all(key == row_key for key, row_key, _ in published)
    # a nullable key column (key_columns): NULL, '' and ' ' are three JSON lists
    table, decoder = _tapped(tmp_path, (make_spec("k", "string", nullable=True),),
                             KeyChoice(COLUMNS, ("k",), synthetic=True))
    published = _published(table, decoder, [{"k": None}, {"k": ""}, {"k": " "}])
    assert [key for key, _, _ in published] == ["[null]", '[""]', '[" "]']
    assert all(key == row_key for key, row_key, _ in published)


def _pg_table(key_kind: str) -> Any:
    from python_ingest.sources.postgres.columns import PgType, converter, spec_of
    from python_ingest.sources.postgres.events import PgTable

    specs, converters = [], []
    for i, (name, type_name, category) in enumerate((("k", key_kind, "S"), ("v", "int4", "N"))):
        pg_type = PgType(100 + i, type_name, category, -1)
        spec = spec_of(name, pg_type, nullable=name != "k")
        specs.append(spec)
        converters.append(converter(spec, pg_type))
    shape = TableShape("public", "riders", tuple(specs), KeyChoice(PRIMARY, ("k",)))
    return PgTable(shape, 7, Encoder(7, shape.avro()), "t.public.riders", tuple(converters),
                   False)


def _pg_insert(values: list[str]) -> bytes:
    out = b"I" + struct.pack(">I", 16401) + b"N" + struct.pack(">h", len(values))
    for value in values:
        data = value.encode()
        out += b"t" + struct.pack(">i", len(data)) + data
    return out


@pytest.mark.postgres_source
@pytest.mark.parametrize("key_kind", ["text", "varchar"])
def test_the_postgres_taps_key_of_an_empty_text_on_both_paths(key_kind: str) -> None:
    """`riders (rider_id text primary key)` holding '': the general path's key is the
    marker; the fast path leaves such keys to it and keeps every other key's bytes."""
    from python_ingest.sources.postgres import events, pgoutput
    from python_ingest.sources.postgres.fastpath import FastTable
    from python_ingest.sources.tap.encoder import envelope_tail

    table = _pg_table(key_kind)
    fast = FastTable.of(table)
    assert fast is not None and fast.raw_key
    env = Envelope("postgres", 5, None)
    tail = envelope_tail("postgres", 5, None, False)
    for text in ["", " ", M, M * 2, "x", M + "x"]:
        payload = _pg_insert([text, "1"])
        msg = pgoutput.decode(payload)
        assert isinstance(msg, pgoutput.Insert)
        change = events.insert(table, msg.new, 9, env)
        assert change.key == row_key_text(text) and change.key and change.record["k"] == text
        general = (change.key.encode(), table.encoder.encode(dict(change.record)))
        fast_out = fast.encode(payload, 6, 9, tail)  # the ref key as an int
        if text.strip(M):
            assert fast_out == general, text  # the bytes it published before
        else:
            assert fast_out is None, text  # the general path encodes it

