"""Column types keep their values through binlog → changelog → decoder, and composite keys."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

TYPES_TABLE = """
CREATE TABLE typed (
  id BIGINT NOT NULL,
  region VARCHAR(20) NOT NULL,
  small TINYINT UNSIGNED, big BIGINT UNSIGNED, neg MEDIUMINT,
  price DECIMAL(12,3), wide DECIMAL(38,10),
  at DATETIME(6), stamped TIMESTAMP(3) NULL, day DATE,
  state ENUM('new','paid','ÿé'), doc JSON, name VARCHAR(50), body TEXT, raw BLOB,
  ratio DOUBLE, flags SET('a','b','c'), dur TIME(2), yr YEAR, bits BIT(5),
  PRIMARY KEY (region, id)
)"""


def test_types_and_composite_keys_survive(tap_env) -> None:
    env = tap_env
    env.sql(TYPES_TABLE)
    env.add_jobs()
    # text in a composite key: keyed by its JSON text (issue #9.7), the columns land as they are
    assert env.jobs[f"{env.database}_typed"]["row_key"] == ["sluice_row_id"]
    env.tap_until_end()  # sets the checkpoint at the current end
    env.sql("""INSERT INTO typed VALUES
      (1, 'eu', 255, 18446744073709551615, -8388608, -123456789.125, 1234567890123456.0123456789,
       '2024-02-29 12:34:56.123456', '2024-03-01 01:02:03.456', '2024-02-29', 'ÿé',
       '{"k": [1, "é"], "n": null}', 'Zürich ☃', 'São Paulo 日本 🚀', x'00ff10', 1.5e300,
       'a,c', '838:59:58.78', 2024, b'10101'),
      (2, 'eu', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL),
      (1, 'us', 0, 0, 0, 0, 0, '1970-01-01 00:00:00', '1970-01-01 00:00:01', '1000-01-01',
       'new', '[]', '', '', '', 0, '', '-12:34:56', 1901, b'0')""")
    env.sql("UPDATE typed SET name = 'Ærøskøbing', price = price + 1 WHERE region = 'eu'")
    env.sql("UPDATE typed SET id = 3 WHERE region = 'us' AND id = 1")  # key change
    env.sql("DELETE FROM typed WHERE id = 2")
    env.tap_until_end()
    assert env.assert_equal("typed") == 2
    rows = env.oracle("typed")
    row = rows['["eu", "1"]']
    assert row["big"] == Decimal(18446744073709551615)
    assert row["price"] == Decimal("-123456788.125")
    assert row["wide"] == Decimal("1234567890123456.0123456789")
    assert row["at"] == datetime(2024, 2, 29, 12, 34, 56, 123456, tzinfo=UTC)
    assert row["stamped"] == datetime(2024, 3, 1, 1, 2, 3, 456000, tzinfo=UTC)
    assert row["day"] == date(2024, 2, 29)
    assert (row["state"], row["name"], row["body"]) == ("ÿé", "Ærøskøbing", "São Paulo 日本 🚀")
    assert row["doc"] == '{"k": [1, "é"], "n": null}'
    assert row["raw"] == b"\x00\xff\x10"
    assert (row["ratio"], row["flags"], row["dur"], row["yr"], row["bits"]) == (
        1.5e300, "a,c", "838:59:58.78", 2024, 21)
    assert set(rows) == {'["eu", "1"]', '["us", "3"]'}
    # Updates carry the full after image, so they are full rows (upserts; issue #9.5).
    decoder = env.decoder("typed")
    events = [decoder.decode(v) for _, v in env.messages("typed")]
    assert events and all(e["_changed_columns"] is None for e in events)
