"""``kind: postgres`` sources in sluice.yml: defaults, names, and errors naming the field."""

from __future__ import annotations

import pytest

from python_ingest.config.source_kinds import PostgresOptions
from python_ingest.config.sources import parse_source
from python_ingest.exceptions import ConfigError

pytestmark = pytest.mark.postgres_source


def test_a_postgres_source_has_its_defaults() -> None:
    source = parse_source("shop", {"kind": "postgres", "database": "shop",
                                   "include": ["public.*"]})
    pg = source.of(PostgresOptions)
    assert (source.port, pg.slot_name, pg.publication_name) == (5432, "sluice_shop", "sluice_shop")
    assert pg.slot_lag_warn_bytes == 1 << 30
    named = parse_source("shop", {"kind": "postgres", "slot": "tap_1", "publication": "pub_1",
                                  "port": 6543})
    assert (named.port, named.of(PostgresOptions).slot_name,
            named.of(PostgresOptions).publication_name) == (6543, "tap_1", "pub_1")
    assert parse_source("maria", {"kind": "mariadb"}).port == 3306


@pytest.mark.parametrize(("raw", "field"), [
    ({"slot": "Bad-Name"}, "sources.shop.slot"),
    ({"publication": 5}, "sources.shop.publication"),
    ({"slot_lag_warn_bytes": -1}, "sources.shop.slot_lag_warn_bytes"),
    ({"database": ["x"]}, "sources.shop.database"),
])
def test_a_wrong_field_names_itself(raw: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        parse_source("shop", {"kind": "postgres", **raw})
