"""The registry of source kinds (sources/tap/kinds.py): every kind a user may write in
sluice.yml has every part, each implementing its hook; an unknown kind names the known ones
(#59.2)."""

from __future__ import annotations

import inspect
from dataclasses import replace

import pytest

from python_ingest.config.source_kinds import SECTIONS
from python_ingest.exceptions import SluiceError
from python_ingest.sources.tap import kinds
from python_ingest.sources.tap.core import TapCore
from python_ingest.verify.kinds import SourceVerify

HOOKS = {"tap": TapCore, "verify": SourceVerify, "status": kinds.SourceStatus}


def test_every_kind_of_the_config_is_in_the_registry_and_no_other() -> None:
    assert set(kinds.KINDS) == set(SECTIONS)


@pytest.mark.parametrize("kind", sorted(kinds.KINDS))
@pytest.mark.parametrize("name", kinds.PARTS)
def test_every_kind_has_every_part(kind: str, name: str) -> None:
    found = kinds.part(kind, name)
    if name in HOOKS:
        assert inspect.isclass(found) and issubclass(found, HOOKS[name]), found
        assert not inspect.isabstract(found), f"{found} leaves hooks unimplemented"
    elif name == "catalog":
        assert isinstance(found(), kinds.Catalog)
    else:  # bootstrap, scaffold: called as (settings, source, ...)
        assert list(inspect.signature(found).parameters)[:2] == ["settings", "source"]


def test_an_unknown_kind_names_the_known_ones() -> None:
    with pytest.raises(SluiceError) as raised:
        kinds.part("oracle", "tap")
    assert "'oracle'" in str(raised.value)
    assert "mariadb, mysql, postgres" in str(raised.value)


def test_a_registered_kind_is_looked_up() -> None:
    try:
        kinds.register("mariadb_copy", kinds.KINDS["mariadb"])
        assert kinds.part("mariadb_copy", "verify").position_kind == "binlog"
        assert kinds.part("postgres", "verify").position_kind == "LSN"
    finally:
        del kinds.KINDS["mariadb_copy"]


def test_the_optional_direct_bootstrap_is_looked_up_too() -> None:
    from python_ingest.config.sources import parse_source
    from python_ingest.sources.tap.chunks import Road

    for kind in ("mysql", "mariadb", "postgres"):
        assert isinstance(kinds.direct(parse_source("shop", {"kind": kind})), Road)
    try:
        kinds.register("pg_copy", replace(kinds.KINDS["postgres"], direct=""))
        with pytest.raises(SluiceError, match=r"kinds only so far: mariadb, mysql, postgres; "
                                              r"bootstrap it through Kafka"):
            kinds.direct(replace(parse_source("shop", {"kind": "postgres"}), kind="pg_copy"))
    finally:
        del kinds.KINDS["pg_copy"]
