"""API tests: real PostgreSQL and Redis, real API keys, requests through DRF's test client."""

from __future__ import annotations

import io
import itertools

import pytest
from rest_framework.test import APIClient

from knowledge.embeddings import EmbeddingConfig
from knowledge.services.knowledge_bases import create_knowledge_base
from tenancy.models import Membership
from tenancy.services import create_api_key
from tests.factories import MembershipFactory, UserFactory, add_document

API = "/api/v1"
_names = itertools.count()

MANUALS = {
    "pumps.md": "# Pump handbook\n\nThe P-100 centrifugal pump moves cooling water. "
    "Replace the mechanical seal when it drips.",
    "sensors.md": "# Sensor notes\n\nThe TH01 sensor reports the casing temperature every "
    "minute and alarms above 85 degrees.",
    "传感器.md": "# 温度传感器\n\n温度传感器每六个月校准一次。校准时使用标准温度计。",
}


def bearer(raw_key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
    return client


def signed_in(user, tenant_slug: str | None = None) -> APIClient:
    client = APIClient()
    client.force_authenticate(user=user)
    if tenant_slug:
        client.credentials(HTTP_X_TENANT=tenant_slug)
    return client


def error_of(response) -> dict:
    """The error body, checked to have the one error shape."""
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "details"}, body
    assert isinstance(body["error"]["details"], dict)
    return body["error"]


def make_kb(tenant, name: str = "Manuals", documents: dict[str, str] | None = None, **settings):
    kb = create_knowledge_base(
        tenant=tenant,
        name=name,
        embedding=EmbeddingConfig(provider="hash", dimensions=64),
        **settings,
    )
    kb.docs = {n: add_document(kb, n, text) for n, text in (documents or {}).items()}
    return kb


@pytest.fixture
def make_key():
    """``make_key(tenant, scopes=("read", "write"), kbs=())`` -> the raw key."""

    def make(tenant, scopes=("read", "write"), kbs=(), name=None) -> str:
        _, raw = create_api_key(
            tenant=tenant,
            name=name or f"key {next(_names)}",
            scopes=scopes,
            knowledge_bases=kbs,
        )
        return raw

    return make


@pytest.fixture
def client(tenant, make_key) -> APIClient:
    """A read+write API key of ``tenant``."""
    return bearer(make_key(tenant))


@pytest.fixture
def kb(tenant):
    """A hash-embedding knowledge base of ``tenant`` with three processed manuals."""
    return make_kb(tenant, documents=MANUALS)


@pytest.fixture
def member():
    """``member(tenant, role)`` -> a user with that role in the tenant."""

    def make(tenant, role=Membership.Role.OWNER):
        return MembershipFactory(tenant=tenant, role=role, user=UserFactory()).user

    return make


def named_file(name: str, data: bytes | str) -> io.BytesIO:
    """A stream the test client sends as a multipart file called ``name``."""
    stream = io.BytesIO(data.encode() if isinstance(data, str) else data)
    stream.name = name
    return stream


def upload(client, kb_id: int, *files: io.BytesIO, **fields):
    return client.post(
        f"{API}/knowledge-bases/{kb_id}/documents",
        {"files": list(files), **fields},
        format="multipart",
    )
