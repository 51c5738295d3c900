"""Dify's ``metadata_condition`` as SearchFilters. Pure: no Django.

Supported (everything else raises UnsupportedCondition, answered as a 400 Dify error):

- ``is`` / ``=`` (one value; ``=`` compares numbers, so "5" matches 5) and ``in`` (a list, or
  a comma-separated text) on any document metadata field, as equality / membership;
- ``before`` / ``after`` on ``upload_date`` or ``created_at`` (ISO 8601 text or Unix seconds),
  as the upload-time bounds;
- ``logical_operator`` ``and`` (the default) across any of those; ``or`` only across values of
  one field (``category is a`` or ``category in [b, c]``), which is membership again.

A condition whose ``name`` is a list (Dify's older contract) applies to each name. A value no
condition can hold (a number that is not finite, such as ``"nan"`` or ``"1e999"``; a moment
outside the years 1-9999) is refused too, naming the condition (``conditions.0``), since
PostgreSQL would refuse it or no document could match it.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

from retrieval.search.types import SearchFilters

EQUALITY = ("is", "=", "in")
DATE_OPERATORS = ("before", "after")
DATE_FIELDS = ("upload_date", "created_at")
SUPPORTED = (*EQUALITY, *DATE_OPERATORS)


class UnsupportedCondition(ValueError):
    """A metadata condition this service cannot apply; the message says what it can."""


def _names(condition: dict) -> list[str]:
    name = condition.get("name")
    names = name if isinstance(name, list) else [name]
    if not names or not all(isinstance(n, str) and n for n in names):
        raise UnsupportedCondition("every condition needs a metadata field name")
    return names


def _number(value: Any) -> int | float:
    if isinstance(value, bool):
        raise UnsupportedCondition("'=' compares numbers")
    if isinstance(value, int):
        return value
    try:
        number = float(value if isinstance(value, float) else str(value).strip())
    except ValueError:
        raise UnsupportedCondition(f"'=' compares numbers, not {value!r}") from None
    if not math.isfinite(number):  # "nan", "inf", "1e999": no stored number equals them
        raise UnsupportedCondition(f"'=' compares finite numbers, not {value!r}")
    return int(number) if number.is_integer() else number


def _values(operator: str, value: Any) -> list:
    if operator == "in":
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, list) and all(not isinstance(v, dict | list) for v in value):
            return list(value)
        raise UnsupportedCondition("'in' takes a list of values")
    if isinstance(value, dict | list):
        raise UnsupportedCondition(f"'{operator}' takes one value; use 'in' for several")
    return [_number(value) if operator == "=" else value]


def _moment(value: Any) -> datetime:
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(value, tz=UTC)
        except (OverflowError, OSError, ValueError):  # beyond the years 1-9999, or NaN
            raise UnsupportedCondition(
                f"Unix seconds from the year 1 to 9999, not {value!r}"
            ) from None
    try:
        moment = datetime.fromisoformat(str(value).strip())
    except ValueError:
        raise UnsupportedCondition(
            f"dates are ISO 8601 text or Unix seconds, not {value!r}"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _clauses(condition: dict) -> list[tuple[str, str, Any]]:
    """(name, operator, values) per name of one condition: the values to match for is, = and
    in, the moment for before and after."""
    operator = condition.get("comparison_operator")
    if operator not in SUPPORTED:
        raise UnsupportedCondition(
            f"comparison operator {operator!r} is not supported; use one of "
            f"{', '.join(SUPPORTED)} (before/after on {' or '.join(DATE_FIELDS)})"
        )
    names = _names(condition)
    value = condition.get("value")
    if operator in DATE_OPERATORS:
        for name in names:
            if name not in DATE_FIELDS:
                raise UnsupportedCondition(
                    f"'{operator}' applies to {' or '.join(DATE_FIELDS)} only, not {name!r}"
                )
        moment = _moment(value)
        return [(name, operator, moment) for name in names]
    values = _values(operator, value)
    return [(name, operator, values) for name in names]


def filters_from_condition(metadata_condition: dict | None) -> SearchFilters:
    """SearchFilters for Dify's ``metadata_condition`` (None or empty: no filter)."""
    if not metadata_condition or not metadata_condition.get("conditions"):
        return SearchFilters()
    logical = (metadata_condition.get("logical_operator") or "and").lower()
    clauses = []
    for index, condition in enumerate(metadata_condition["conditions"]):
        try:
            clauses.extend(_clauses(condition))
        except UnsupportedCondition as exc:
            raise UnsupportedCondition(f"conditions.{index}: {exc}") from None
    if logical == "or" and len(clauses) > 1:
        if len({name for name, _, _ in clauses}) != 1 or any(
            op not in EQUALITY for _, op, _ in clauses
        ):
            raise UnsupportedCondition(
                "'or' is supported across values of one metadata field (is, =, in) only"
            )
        name = clauses[0][0]
        union = {_key(v): v for _, _, values in clauses for v in values}
        return SearchFilters.from_dict({"metadata": {name: list(union.values())}})
    if logical not in ("and", "or"):
        raise UnsupportedCondition("logical_operator is 'and' or 'or'")
    return _conjunction(clauses)


def _conjunction(clauses: list[tuple[str, str, Any]]) -> SearchFilters:
    metadata: dict[str, dict[str, Any]] = {}
    after = before = None
    for name, operator, values in clauses:
        if operator in DATE_OPERATORS:
            if operator == "after":
                after = max(after, values) if after else values
            else:
                before = min(before, values) if before else values
            continue
        allowed = {_key(v): v for v in values}
        if name in metadata:  # two conditions on one field: both must hold
            allowed = {k: v for k, v in metadata[name].items() if k in allowed}
        metadata[name] = allowed
    return SearchFilters.from_dict(
        {
            "metadata": {
                name: next(iter(values.values())) if len(values) == 1 else list(values.values())
                for name, values in metadata.items()
            },
            "created_after": after,
            "created_before": before,
        }
    )
