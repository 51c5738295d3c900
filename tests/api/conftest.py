"""API tests: real PostgreSQL and Redis, real API keys, requests through DRF's test client.

The API helpers and the ``make_key`` and ``member`` fixtures live in tests/conftest.py (the
tenancy and reliability tests use them too); the helpers are imported here as well, where the
API tests have always imported them from.
"""

from __future__ import annotations

import io

import pytest
from rest_framework.test import APIClient

from knowledge.embeddings import EmbeddingConfig
from knowledge.services.knowledge_bases import create_knowledge_base
from tests.conftest import API, bearer, error_of, signed_in  # noqa: F401
from tests.factories import add_document

MANUALS = {
    "pumps.md": "# Pump handbook\n\nThe P-100 centrifugal pump moves cooling water. "
    "Replace the mechanical seal when it drips.",
    "sensors.md": "# Sensor notes\n\nThe TH01 sensor reports the casing temperature every "
    "minute and alarms above 85 degrees.",
    "传感器.md": "# 温度传感器\n\n温度传感器每六个月校准一次。校准时使用标准温度计。",
}


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
def client(tenant, make_key) -> APIClient:
    """A read+write API key of ``tenant``."""
    return bearer(make_key(tenant))


@pytest.fixture
def kb(tenant):
    """A hash-embedding knowledge base of ``tenant`` with three processed manuals."""
    return make_kb(tenant, documents=MANUALS)


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
