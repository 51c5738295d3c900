"""The OpenAPI schema describes every endpoint, request and response, and Swagger UI shows it."""

import inspect
import io

import pytest
import yaml
from django.core.management import call_command
from rest_framework.test import APIClient

from retrieval.api.dify import (
    ConditionSerializer,
    DifyRetrievalRequestSerializer,
    MetadataConditionSerializer,
    RetrievalSettingSerializer,
)
from retrieval.api.serializers import SearchFiltersSerializer
from tenancy.api.fields import FieldsOnceSerializer

pytestmark = pytest.mark.django_db

PATHS = {
    "/api/v1/me": {"get"},
    "/api/v1/knowledge-bases": {"get", "post"},
    "/api/v1/knowledge-bases/{id}": {"get", "patch", "delete"},
    "/api/v1/knowledge-bases/{id}/documents": {"get", "post"},
    "/api/v1/knowledge-bases/{id}/documents/retry-failed": {"post"},  # bulk
    "/api/v1/knowledge-bases/{id}/documents/delete": {"post"},  # bulk
    "/api/v1/knowledge-bases/{id}/chunks": {"get"},
    "/api/v1/knowledge-bases/{id}/search": {"post"},
    "/api/v1/knowledge-bases/{id}/context": {"post"},
    "/api/v1/documents/{id}": {"get", "delete", "patch"},  # patch: enable/disable
    "/api/v1/documents/{id}/reprocess": {"post"},
    "/api/v1/documents/{id}/chunks": {"get", "post"},  # post: a chunk added by hand
    "/api/v1/chunks/{id}": {"get", "patch"},  # patch: curation
    "/api/v1/search": {"post"},
    "/api/v1/context": {"post"},
    "/api/v1/api-keys": {"get", "post"},
    "/api/v1/api-keys/{id}": {"get"},
    "/api/v1/api-keys/{id}/revoke": {"post"},
    "/api/v1/dify/retrieval": {"post"},
    "/api/v1/knowledge-bases/{id}/web-sources": {"get", "post"},
    "/api/v1/web-sources/{id}": {"get", "patch", "delete"},
    "/api/v1/web-sources/{id}/sync": {"post"},
}


@pytest.fixture
def schema():
    response = APIClient().get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi")
    assert response.status_code == 200
    return yaml.safe_load(response.content)


def test_the_schema_is_public_and_lists_every_endpoint(schema):
    assert schema["openapi"].startswith("3.")
    assert {path: set(ops) - {"parameters"} for path, ops in schema["paths"].items()} == PATHS


def test_every_operation_describes_its_bodies_errors_and_bearer_auth(schema):
    assert schema["components"]["securitySchemes"]["ApiKeyAuth"]["scheme"] == "bearer"
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            assert {"401", "403", "429"} <= set(responses) or path.endswith("dify/retrieval")
            assert {"ApiKeyAuth": []} in operation["security"], (method, path)
            success = [code for code in responses if code.startswith("2")]
            assert len(success) == 1, (method, path)
            if success[0] != "204":
                assert "content" in responses[success[0]], (method, path)
            # actions without a body: reprocess, revoke, sync, retry every failed document
            bodiless = ("reprocess", "revoke", "sync", "retry-failed")
            if method in ("post", "patch") and not path.endswith(bodiless):
                assert "requestBody" in operation, (method, path)
            for code, response in responses.items():
                if code.startswith("4") and not path.endswith("dify/retrieval"):
                    ref = response["content"]["application/json"]["schema"]["$ref"]
                    assert ref == "#/components/schemas/Error", (method, path, code)


def test_no_request_body_is_described_by_the_base_class_that_builds_its_fields(schema):
    """A serializer without a docstring of its own is described by its fields, not by
    FieldsOnceSerializer's docstring (how fields are made, nothing a client can use)."""
    components = schema["components"]["schemas"]
    internal = inspect.cleandoc(FieldsOnceSerializer.__doc__)
    assert [name for name, c in components.items() if c.get("description") == internal] == []
    assert components["SearchOptionsRequest"]["description"].startswith("What every search")


@pytest.mark.parametrize(
    "component, serializer",
    [
        ("SearchFiltersRequest", SearchFiltersSerializer),
        ("DifyRetrievalRequestRequest", DifyRetrievalRequestSerializer),
        ("RetrievalSettingRequest", RetrievalSettingSerializer),
        ("MetadataConditionRequest", MetadataConditionSerializer),
        ("ConditionRequest", ConditionSerializer),
    ],
)
def test_search_filters_and_difys_request_bodies_say_what_they_are(schema, component, serializer):
    """An API reader filling in these objects reads what each is: its serializer's own
    docstring is the component's description."""
    description = schema["components"]["schemas"][component].get("description")
    assert description == inspect.cleandoc(serializer.__doc__ or "")


def test_the_schema_validates_without_warnings():
    call_command("spectacular", "--validate", "--fail-on-warn", stdout=io.StringIO())


def test_swagger_ui_is_served():
    response = APIClient().get("/api/docs/")
    assert response.status_code == 200 and b"swagger" in response.content.lower()
