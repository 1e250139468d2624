"""Validation helpers of the config modules: each raises ConfigError naming the field."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from python_ingest.exceptions import ConfigError

NAME = re.compile(r"^[a-z][a-z0-9_]*$")
SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2,
          "mib": 1024**2, "g": 1000**3, "gb": 1000**3, "gib": 1024**3, "t": 1000**4,
          "tb": 1000**4, "tib": 1024**4}


def parse_size(value: Any, field_name: str) -> int:
    """Parse a byte size such as ``256MiB``, ``1GB`` or ``1048576``."""
    if isinstance(value, bool):
        raise ConfigError(field_name, f"expected a size like '256MiB', got {value!r}")
    if isinstance(value, int):
        size = value
    else:
        m = SIZE.match(str(value))
        if not m or m.group(2) is None and not str(value).strip():
            raise ConfigError(field_name, f"expected a size like '256MiB', got {value!r}")
        unit = (m.group(2) or "").lower()
        if unit not in UNITS:
            raise ConfigError(field_name, f"unknown size unit in {value!r}", "use B, KiB, MiB, GiB")
        size = int(float(m.group(1)) * UNITS[unit])
    if size <= 0:
        raise ConfigError(field_name, f"must be positive, got {value!r}")
    return size


def positive_int(value: Any, field_name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(field_name, f"expected a positive whole number, got {value!r}")
    return value


def choice(value: Any, choices: tuple[str, ...], field_name: str) -> str:
    if value not in choices:
        raise ConfigError(field_name, f"{value!r} is not one of {', '.join(choices)}")
    return str(value)


def mapping(value: Any, field_name: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(field_name, f"expected a mapping, got {type(value).__name__}")
    return value


def heap(value: Any) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"\d+[mMgG]", value):
        raise ConfigError("broker.heap", f"expected a JVM heap size like '512m' or '1g', "
                          f"got {value!r}")
    return value


def check_keys(raw: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}", "unknown setting",
                          f"allowed: {', '.join(sorted(allowed))}")
