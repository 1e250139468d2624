"""Py4J's name look-ups remembered per process (runtime/py4j_lookups.py): a class, a package
and a static method are asked of the JVM once; a static field's value and an unknown name
are asked each time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from py4j import java_gateway
from py4j.protocol import Py4JError

from python_ingest.runtime import py4j_lookups


@pytest.fixture
def commands(spark: Any) -> Iterator[list[str]]:
    """The Py4J commands this process sends while the test runs."""
    sent: list[str] = []
    original = java_gateway.GatewayClient.send_command

    def counting(self: Any, command: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(command)
        return original(self, command, *args, **kwargs)

    java_gateway.GatewayClient.send_command = counting  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        java_gateway.GatewayClient.send_command = original  # type: ignore[method-assign]


def test_a_class_and_a_static_method_are_asked_once(spark: Any,
                                                    commands: list[str]) -> None:
    assert py4j_lookups.install()  # build_session installed it: still on, idempotent
    jvm = spark._jvm
    first = jvm.org.apache.hadoop.fs.Path
    assert jvm.org.apache.hadoop.fs.Path is first
    assert str(jvm.org.apache.hadoop.fs.Path("/a/b").getName()) == "b"  # still a class
    assert jvm.java.util.regex.Pattern.compile is jvm.java.util.regex.Pattern.compile
    commands.clear()
    jvm.org.apache.hadoop.fs.Path  # noqa: B018
    jvm.java.util.regex.Pattern.compile  # noqa: B018
    assert commands == []  # asked once at most, not again


def test_a_static_field_and_an_unknown_name_are_asked_each_time(spark: Any,
                                                                 commands: list[str]) -> None:
    jvm = spark._jvm
    assert jvm.java.lang.Integer.MAX_VALUE == 2**31 - 1
    asked = len(commands)
    assert jvm.java.lang.Integer.MAX_VALUE == 2**31 - 1
    assert len(commands) == asked + 1  # the field's value is read again
    for _ in range(2):
        with pytest.raises(Py4JError):
            jvm.java.lang.Integer.no_such_member_here  # noqa: B018
    assert len(commands) == asked + 3
    assert "no_such_member_here" not in vars(jvm.java.lang.Integer)
