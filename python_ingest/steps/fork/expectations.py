"""A Great Expectations suite compiled to Spark SQL: the fork's rules in one pass.

The suite stays Great Expectations' own JSON file (``expectations/<staging model>.json``, what
users edit). Each row-level expectation with a SQL form becomes a predicate saying "this row
is unexpected", and the fork evaluates all of them in one Spark job that tags every row with
the expectations it failed (steps/fork/split.py) instead of one Great Expectations validation per
batch (a Spark job or more per expectation, and the failing rows' ids collected on the driver).

Semantics follow Great Expectations' Spark implementation: column map expectations ignore
NULLs (only ``not_null`` / ``be_null`` judge them), ``mostly`` changes whether the expectation
succeeds, never which rows are unexpected, and a ``row_condition`` (``condition_parser:
spark``) narrows the rows judged. On top, the fork judges a partial update only on the columns
it changes and a delete only on sluice's ``_`` columns (``judged_rows``).

An expectation without a SQL form here (its type, or a row condition in another parser) is
left to Great Expectations' own validation, with a warning naming it (``Compiled.fallback``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from python_ingest.exceptions import PipelineError


def sql_string(value: str) -> str:
    """A Spark SQL string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sql_literal(value: Any) -> str:
    """A Spark SQL literal for a suite's JSON value (numbers as numbers, the rest as text)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if value is None:
        return "null"
    return sql_string(str(value))


def quoted(column: str) -> str:
    return "`" + column.replace("`", "``") + "`"


def judged_rows(column: str) -> str | None:
    """The rows the fork judges on ``column`` (Spark SQL), or None for every row: partial
    updates only on their changed columns, deletes only on sluice's ``_`` columns."""
    if not column or column.startswith("_"):
        return None
    return (f"NOT `_is_deleted` AND (`_changed_columns` IS NULL OR "
            f"array_contains(`_changed_columns`, {sql_string(column)}))")


def label(kind: str, kwargs: dict[str, Any]) -> str:
    """An expectation as the error table and the reports name it."""
    hidden = ("column", "batch_id", "result_format", "row_condition", "condition_parser")
    shown = {k: v for k, v in kwargs.items() if k not in hidden}
    args = ", ".join(f"{k}={v!r}" for k, v in sorted(shown.items()))
    return f"{kind}({args})" if args else kind


def failure_name(column: str, expectation: str) -> str:
    """A failure as ``error_exception`` lists it: ``column: expectation``."""
    return f"{column}: {expectation}" if column else expectation


@dataclass(frozen=True)
class Rule:
    """One row-level expectation as SQL: on the rows ``judged`` holds for, a row is
    unexpected when ``unexpected`` holds."""

    index: int  # its position in the suite
    kind: str
    kwargs: dict[str, Any]
    column: str
    judged: str  # SQL boolean: the rows this expectation judges
    unexpected: str  # SQL boolean: a judged row that fails it

    @property
    def label(self) -> str:
        return label(self.kind, self.kwargs)

    @property
    def failure(self) -> str:
        return failure_name(self.column, self.label)


@dataclass(frozen=True)
class TableRule:
    """A batch-level expectation (no row fails it alone): figures only, no routing."""

    index: int
    kind: str
    kwargs: dict[str, Any]
    ok: str  # SQL aggregate boolean over the judged batch

    @property
    def label(self) -> str:
        return label(self.kind, self.kwargs)


@dataclass(frozen=True)
class Compiled:
    """A suite as SQL: its row rules, its batch rules, and what stays with GE."""

    rules: list[Rule] = field(default_factory=list)
    table_rules: list[TableRule] = field(default_factory=list)
    fallback: list[dict[str, Any]] = field(default_factory=list)  # as judged_suite gives them
    fallback_index: list[int] = field(default_factory=list)  # their positions in the suite


def _between(value: str, kwargs: dict[str, Any], low: str = "min_value",
             high: str = "max_value") -> str | None:
    """``value`` outside [min, max] (strict_min / strict_max honoured), or None without bounds."""
    parts = []
    if kwargs.get(low) is not None:
        parts.append(f"{value} {'>' if kwargs.get('strict_min') else '>='} "
                     f"{sql_literal(kwargs[low])}")
    if kwargs.get(high) is not None:
        parts.append(f"{value} {'<' if kwargs.get('strict_max') else '<='} "
                     f"{sql_literal(kwargs[high])}")
    return f"NOT ({' AND '.join(parts)})" if parts else None


def _values(kwargs: dict[str, Any]) -> str | None:
    values = kwargs.get("value_set")
    if not isinstance(values, list):
        return None
    return ", ".join(sql_literal(v) for v in values) if values else "NULL"


def _unexpected(kind: str, column: str, kwargs: dict[str, Any]) -> str | None:
    """The SQL "this row is unexpected" of a column map expectation, or None (no SQL form)."""
    c = quoted(column)
    present = f"{c} IS NOT NULL"
    if kind == "expect_column_values_to_not_be_null":
        return f"{c} IS NULL"
    if kind == "expect_column_values_to_be_null":
        return present
    if kind == "expect_column_values_to_be_in_set":
        values = _values(kwargs)
        return None if values is None else f"{present} AND NOT coalesce({c} IN ({values}), false)"
    if kind == "expect_column_values_to_not_be_in_set":
        values = _values(kwargs)
        return None if values is None else f"{present} AND coalesce({c} IN ({values}), false)"
    if kind == "expect_column_values_to_be_between":
        outside = _between(c, kwargs)
        return None if outside is None else f"{present} AND {outside}"
    if kind == "expect_column_value_lengths_to_be_between":
        outside = _between(f"length({c})", kwargs)
        return None if outside is None else f"{present} AND {outside}"
    if kind == "expect_column_value_lengths_to_equal":
        value = kwargs.get("value")
        return None if value is None else f"{present} AND length({c}) != {sql_literal(value)}"
    if kind in ("expect_column_values_to_match_regex", "expect_column_values_to_not_match_regex"):
        regex = kwargs.get("regex")
        if not isinstance(regex, str):
            return None
        matches = f"coalesce({c} RLIKE {sql_string(regex)}, false)"
        return (f"{present} AND NOT {matches}" if kind.endswith("_to_match_regex")
                else f"{present} AND {matches}")
    if kind == "expect_column_values_to_match_regex_list":
        regexes = kwargs.get("regex_list")
        if not isinstance(regexes, list) or not regexes:
            return None
        tests = [f"coalesce({c} RLIKE {sql_string(str(r))}, false)" for r in regexes]
        joined = " OR ".join(tests) if kwargs.get("match_on", "any") == "any" else \
            " AND ".join(tests)
        return f"{present} AND NOT ({joined})"
    if kind == "expect_column_values_to_be_unique":
        # unique within the judged rows of the batch: a window over them (fork.py)
        return f"{present} AND __sluice_count_{{index}} > 1"
    return None


def _table_ok(kind: str, kwargs: dict[str, Any]) -> str | None:
    """The SQL aggregate "the batch meets it" of a table expectation, or None."""
    if kind == "expect_table_row_count_to_be_between":
        outside = _between("count(*)", kwargs)
        return "true" if outside is None else f"NOT ({outside})"
    if kind == "expect_table_row_count_to_equal" and kwargs.get("value") is not None:
        return f"count(*) = {sql_literal(kwargs['value'])}"
    return None


def compile_suite(suite: dict[str, Any], columns: list[str]) -> Compiled:
    """The suite's expectations as SQL on a batch with ``columns``; a column the batch lacks
    is a PipelineError naming the expectation (Great Expectations would fail it too)."""
    known = {c.lower() for c in columns}
    rules, table_rules, fallback, fallback_index = [], [], [], []
    for index, expectation in enumerate(suite.get("expectations") or []):
        kind = str(expectation.get("type") or expectation.get("expectation_type") or "")
        kwargs = dict(expectation.get("kwargs") or {})
        column = str(kwargs.get("column") or "")
        own = kwargs.get("row_condition")
        parser = kwargs.get("condition_parser")
        sql_condition = own is None or (isinstance(own, str) and parser == "spark")
        unexpected = _unexpected(kind, column, kwargs) if column and sql_condition else None
        ok = _table_ok(kind, kwargs) if not column and own is None else None
        if unexpected is None and ok is None:
            fallback.append(judged_suite([expectation])[0])
            fallback_index.append(index)
            continue
        if column and column.lower() not in known:
            raise PipelineError(f"expectation {label(kind, kwargs)} names column {column!r}, "
                                "which the converter does not produce: fix the suite or the "
                                "converter")
        if ok is not None:
            table_rules.append(TableRule(index, kind, kwargs, ok))
            continue
        assert unexpected is not None
        conditions = [f"({own})" if own else None, judged_rows(column)]
        judged = " AND ".join(c for c in conditions if c) or "true"
        rules.append(Rule(index, kind, kwargs, column, judged,
                          unexpected.replace("{index}", str(index))))
    return Compiled(rules, table_rules, fallback, fallback_index)


def judged_suite(expectations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The suite's expectations, each restricted to the rows the fork judges on its column
    (for Great Expectations' own validation: the fallback)."""
    judged = []
    for expectation in expectations:
        kwargs = dict(expectation.get("kwargs") or {})
        condition = judged_rows(str(kwargs.get("column") or ""))
        own = kwargs.get("row_condition")
        if condition and own is None:
            kwargs.update(row_condition=condition, condition_parser="spark")
        elif condition and isinstance(own, str) and kwargs.get("condition_parser") == "spark":
            kwargs["row_condition"] = f"({own}) AND {condition}"
        judged.append({**expectation, "kwargs": kwargs})
    return judged


def load_suite(text: str, where: str) -> dict[str, Any]:
    """A suite file's JSON (GE's own format: name, expectations[type, kwargs], meta)."""
    try:
        suite = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PipelineError(f"expectation suite {where} is not valid JSON: {exc}") from exc
    if not isinstance(suite, dict) or not isinstance(suite.get("expectations"), list):
        raise PipelineError(f"expectation suite {where} needs a list 'expectations' of "
                            "{type, kwargs} objects (Great Expectations' suite format)")
    for n, expectation in enumerate(suite["expectations"]):
        if not isinstance(expectation, dict) or not re.match(
                r"^expect_\w+$", str(expectation.get("type") or "")):
            raise PipelineError(f"expectation suite {where}: expectation {n + 1} needs a 'type' "
                                "(expect_...) and 'kwargs'")
    return suite
