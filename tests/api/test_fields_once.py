"""``FieldsOnceSerializer``: request serializers whose fields are constructed once per class
validate exactly as DRF's own serializers do, and no instance's binding reaches another's."""

from __future__ import annotations

import copy

import pytest
from rest_framework import serializers

from retrieval.api.dify import DifyRetrievalRequestSerializer
from retrieval.api.serializers import (
    ContextRequestSerializer,
    MultiSearchRequestSerializer,
    SearchOptionsSerializer,
)

BODIES = [
    {"query": "pump seal"},
    {"query": "pump seal", "mode": "hybrid", "top_k": 5, "explain": True},
    {"query": ""},
    {"query": "x" * 5000},
    {"query": "q", "top_k": 0, "mode": "sideways", "vector_weight": "NaN"},
    {"query": "q", "vector_weight": -1, "keyword_weight": 101, "score_threshold": 2},
    {"query": "q", "filters": {"document_ids": [1, 2], "metadata": {"lang": ["en", "de"]}}},
    {"query": "q", "filters": {"document_ids": ["a"], "max_age_days": -3}},
    {"query": "q", "filters": {"metadata": {f"k{i}": i for i in range(51)}}},
    {"query": "q", "filters": {"created_after": "yesterday", "exclude_chunk_ids": [0]}},
    {"query": "q", "filters": "all"},
    {"query": "q", "knowledge_base_ids": [1, 2], "max_chars": 500},
    {"query": "q", "knowledge_base_ids": [], "max_chars": 10},
    {"query": "q", "rerank": "maybe", "candidate_multiplier": 51, "rerank_top_n": 0},
    {},
]


def _as_drf_would(serializer_class: type[serializers.Serializer]) -> type:
    """The same serializer, with DRF's own ``get_fields`` (a deep copy per instance) for it and
    every nested serializer."""

    def plain(field):
        if isinstance(field, serializers.ListSerializer):
            kwargs = {k: v for k, v in field._kwargs.items() if k != "child"}
            return type(field)(*field._args, child=plain(field.child), **kwargs)
        if isinstance(field, serializers.Serializer):
            return _as_drf_would(type(field))(*field._args, **field._kwargs)
        return copy.deepcopy(field)

    def get_fields(self):
        return {name: plain(field) for name, field in self._declared_fields.items()}

    name = f"Plain{serializer_class.__name__}"
    return type(name, (serializer_class,), {"get_fields": get_fields})


@pytest.mark.parametrize(
    "serializer_class",
    [
        SearchOptionsSerializer,
        MultiSearchRequestSerializer,
        ContextRequestSerializer,
        DifyRetrievalRequestSerializer,
    ],
)
def test_validates_every_body_as_drfs_own_fields_do(serializer_class):
    plain_class = _as_drf_would(serializer_class)
    bodies = [*BODIES, {"knowledge_id": "7", "query": "q", "retrieval_setting": {"top_k": 3}}]
    bodies.append({"knowledge_id": "7", "query": "q", "retrieval_setting": {"top_k": 0}})
    for body in bodies * 2:  # the second round: the class's fields made already
        ours, theirs = serializer_class(data=body), plain_class(data=body)
        assert ours.is_valid() == theirs.is_valid(), body
        assert ours.errors == theirs.errors, body
        if not ours.errors:
            assert ours.validated_data == theirs.validated_data, body


def test_each_instance_binds_copies_of_its_own():
    first = SearchOptionsSerializer(data={"query": "first", "top_k": 3})
    second = SearchOptionsSerializer(data={"query": "second", "top_k": 0})
    assert first.is_valid() and not second.is_valid()
    assert first.validated_data["query"] == "first"
    assert set(second.errors) == {"top_k"}
    for name, field in first.fields.items():
        assert field.parent is first and field.field_name == name
        assert second.fields[name] is not field and second.fields[name].parent is second
    # The nested serializer and list fields are each instance's own, bound to it.
    assert first.fields["filters"] is not second.fields["filters"]
    ids = first.fields["filters"].fields["document_ids"]
    assert ids.child.parent is ids and ids.root is first
    # The class's prototypes stay unbound.
    prototypes = SearchOptionsSerializer.__dict__["_field_prototypes"]
    assert all(getattr(f, "parent", None) is None for f, _ in prototypes.values())
    assert MultiSearchRequestSerializer.__dict__.get("_field_prototypes") is not prototypes
