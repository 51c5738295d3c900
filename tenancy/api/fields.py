"""Serializer fields shared by the API's serializers."""

from __future__ import annotations

import json
import math

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from tenancy.api.converters import MAX_ID


def _bad_text(value) -> bool:
    """Text PostgreSQL cannot store: NUL characters and unpaired surrogates."""
    if isinstance(value, str):
        return "\x00" in value or any("\ud800" <= ch <= "\udfff" for ch in value)
    if isinstance(value, dict):
        return any(_bad_text(k) or _bad_text(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_bad_text(v) for v in value)
    return False


def storable_json(value):
    """Validator: JSON whose texts PostgreSQL can store (jsonb refuses NUL and lone surrogates)."""
    if _bad_text(value):
        raise serializers.ValidationError(
            "Text must not contain NUL characters or unpaired surrogates."
        )
    return value


class FiniteFloatField(serializers.FloatField):
    """A float that is a number: NaN and infinities are refused (they fail every comparison)."""

    default_error_messages = {"finite": "A finite number is required."}

    def to_internal_value(self, data) -> float:
        value = super().to_internal_value(data)
        if not math.isfinite(value):
            self.fail("finite")
        return value


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": True,
        "description": "A JSON object. In multipart forms: its JSON text.",
    }
)
class JSONObjectField(serializers.JSONField):
    """A JSON object (in multipart forms: its JSON text), at most ``max_chars`` when encoded."""

    default_error_messages = {
        "not_object": "A JSON object is required.",
        "too_long": "At most {max_chars} characters of JSON.",
    }

    def __init__(self, *, max_chars: int = 10_000, **kwargs) -> None:
        self.max_chars = max_chars
        super().__init__(**kwargs)

    def to_internal_value(self, data) -> dict:
        value = super().to_internal_value(data)
        if not isinstance(value, dict):
            self.fail("not_object")
        storable_json(value)
        if len(json.dumps(value, ensure_ascii=False)) > self.max_chars:
            self.fail("too_long", max_chars=self.max_chars)
        return value


def id_field(**kwargs) -> serializers.IntegerField:
    """An object id: a positive integer that fits the database's ids."""
    return serializers.IntegerField(min_value=1, max_value=MAX_ID, **kwargs)
