"""Serializer fields shared by the API's serializers."""

from __future__ import annotations

import copy
import json
import math

from drf_spectacular.plumbing import get_lib_doc_excludes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from tenancy.api.converters import MAX_ID
from tenancy.api.parsers import JSONRefused, field_errors, loads, refusal


class FieldsOnceSerializer(serializers.Serializer):
    """A serializer whose declared fields are constructed once per class, not per instance.

    DRF deep-copies a serializer's declared fields for every instance, and deep-copying a field
    runs its constructor again (validators included), on every request. Here a class keeps one
    deep copy of them, made on first use, and each instance takes a shallow copy of every leaf
    field: binding a field to its serializer only assigns the copy's own attributes (name,
    parent, source, label), and validating reads the shared ones (its validators, choices and
    messages). Fields with children (lists, dicts, nested serializers) are deep-copied as DRF
    does, since their children are bound to them. Validation gives the same data and errors
    either way (tests/api/test_fields_once.py); what it saves a search request is in
    docs/performance.md.

    For request bodies whose fields no code changes in place on an instance (DRF allows that;
    a subclass that does must not use this class). This docstring never describes a subclass in
    the OpenAPI schema (``schema_doc_excludes``): a subclass describes itself or is described by
    its fields."""

    def get_fields(self) -> dict[str, serializers.Field]:
        cls = type(self)
        prototypes = cls.__dict__.get("_field_prototypes")
        if prototypes is None:
            # Two threads may both make them: the same fields, one set kept.
            prototypes = {
                name: (field, copy.deepcopy if _has_children(field) else copy.copy)
                for name, field in copy.deepcopy(self._declared_fields).items()
            }
            cls._field_prototypes = prototypes
        return {name: made(field) for name, (field, made) in prototypes.items()}


def _has_children(field: serializers.Field) -> bool:
    return isinstance(field, serializers.BaseSerializer) or hasattr(field, "child")


def schema_doc_excludes() -> list[type]:
    """Classes whose docstrings never describe a schema component (drf-spectacular's
    ``GET_LIB_DOC_EXCLUDES``): DRF's own, and ``FieldsOnceSerializer``, whose docstring says how
    its fields are made, which no reader of the API needs. drf-spectacular otherwise describes a
    serializer without a docstring of its own by its nearest base's."""
    return [*get_lib_doc_excludes(), FieldsOnceSerializer]


def storable_json(value):
    """Validator: JSON PostgreSQL can store and search (jsonb refuses NUL, lone surrogates and
    numbers that are not finite), nested at most MAX_JSON_DEPTH deep. The message names where
    in the value the problem is."""
    problem = refusal(value, text=True)
    if problem is not None:
        raise serializers.ValidationError(field_errors(problem))
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
        if getattr(data, "is_json_string", False):  # a form's text: read as the API reads JSON
            try:
                data = loads(data)
            except JSONRefused as exc:
                raise serializers.ValidationError(field_errors(exc)) from None
            except ValueError:
                self.fail("invalid")
        storable_json(data)
        value = super().to_internal_value(data)
        if not isinstance(value, dict):
            self.fail("not_object")
        if len(json.dumps(value, ensure_ascii=False)) > self.max_chars:
            self.fail("too_long", max_chars=self.max_chars)
        return value


def id_field(**kwargs) -> serializers.IntegerField:
    """An object id: a positive integer that fits the database's ids."""
    return serializers.IntegerField(min_value=1, max_value=MAX_ID, **kwargs)
