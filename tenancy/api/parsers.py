"""JSON request bodies as the API reads them: DRF's default JSON parser, and ``loads`` for JSON
read elsewhere (the MCP endpoint's body, JSON text in a multipart form).

Python's ``json`` reads more than any field can take, and taken further some of it fails as a
server error: a number beyond a float's range (``1e999`` reads as infinity, which jsonb refuses
and every comparison fails; ``NaN`` and ``Infinity`` themselves are refused, as DRF's strict
mode refuses them), and nesting deep enough to exhaust Python's recursion (a RecursionError
while parsing, or in any recursive walk of the value). So JSON is refused as bad input when it
nests arrays and objects deeper than ``MAX_JSON_DEPTH`` (a parse error: it is about the body as
a whole) or holds a number that is not finite (a validation error of the field holding it,
worded as a float field words it). ``refusal`` walks a value without recursion, so no depth
can exhaust the stack there either.
"""

from __future__ import annotations

import json
import math
from typing import Any

from rest_framework import parsers, serializers
from rest_framework.exceptions import ParseError

# Far beyond any body the API documents (a search filter's metadata value is the deepest,
# a few levels), far below Python's recursion limit.
MAX_JSON_DEPTH = 64
NOT_FINITE = "A finite number is required."
TOO_DEEP = f"Arrays and objects are nested at most {MAX_JSON_DEPTH} deep."
UNSTORABLE_TEXT = "Text must not contain NUL characters or unpaired surrogates."


class JSONRefused(ValueError):
    """JSON that parses but is not taken. ``path``: the keys and indexes leading to the value
    (empty: the value as a whole)."""

    def __init__(self, message: str, path: tuple = ()) -> None:
        super().__init__(message)
        self.path = path


def _constant(name: str) -> float:
    raise ValueError(f"Out of range float values are not JSON compliant: {name!r}")


def loads(text: str | bytes) -> Any:
    """``text`` as JSON. Raises ValueError: JSONDecodeError or UnicodeDecodeError for what is
    not JSON, JSONRefused for JSON nested too deep or holding a number that is not finite."""
    try:
        value = json.loads(text, parse_constant=_constant)
    except RecursionError:
        raise JSONRefused(TOO_DEEP) from None
    problem = refusal(value)
    if problem is not None:
        raise problem
    return value


def _bad_text(text: str) -> bool:
    return "\x00" in text or any("\ud800" <= ch <= "\udfff" for ch in text)


def refusal(value: Any, text: bool = False) -> JSONRefused | None:
    """Why ``value`` (parsed JSON) is not taken, or None: nesting deeper than MAX_JSON_DEPTH, a
    number that is not finite, and with ``text`` a key or text PostgreSQL cannot store (NUL,
    unpaired surrogates)."""

    def bad(item: Any) -> str | None:
        if isinstance(item, float) and not math.isfinite(item):
            return NOT_FINITE
        if text and isinstance(item, str) and _bad_text(item):
            return UNSTORABLE_TEXT
        return None

    if not isinstance(value, dict | list):
        message = bad(value)
        return JSONRefused(message) if message else None
    stack: list[tuple[dict | list, tuple, int]] = [(value, (), 1)]
    while stack:
        container, path, depth = stack.pop()
        is_object = isinstance(container, dict)
        for key, item in container.items() if is_object else enumerate(container):
            if is_object and text and _bad_text(key):
                return JSONRefused(UNSTORABLE_TEXT, (*path, key))
            if isinstance(item, dict | list):
                if depth >= MAX_JSON_DEPTH:
                    return JSONRefused(TOO_DEEP)
                stack.append((item, (*path, key), depth + 1))
                continue
            message = bad(item)
            if message:
                return JSONRefused(message, (*path, key))
    return None


def field_errors(refused: JSONRefused) -> dict | list:
    """A JSONRefused as DRF's error detail: nested by its path as serializers nest theirs."""
    detail: dict | list = [str(refused)]
    for key in reversed(refused.path):
        detail = {key: detail}
    return detail


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser reading through ``loads``: nesting too deep answers 400 ``parse_error``,
    a number that is not finite 400 ``invalid`` naming its field (``details.fields``)."""

    def parse(self, stream, media_type=None, parser_context=None) -> Any:
        encoding = parsers.get_encoding(parser_context or {})
        try:
            return loads(stream.read().decode(encoding))
        except JSONRefused as exc:
            if exc.path:
                raise serializers.ValidationError(field_errors(exc)) from None
            raise ParseError(f"JSON parse error - {exc}") from None
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
