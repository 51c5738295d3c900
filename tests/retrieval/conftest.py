"""Knowledge bases with real processed documents for retrieval tests."""

import io

import pytest

from knowledge.embeddings import EmbeddingConfig
from knowledge.models import Document
from knowledge.services.documents import create_document
from knowledge.services.knowledge_bases import create_knowledge_base
from knowledge.services.processing import process_document
from tests.factories import TenantFactory


def add_document(kb, name: str, text: str, **kwargs) -> Document:
    """Upload and process in this process (no worker): the document is ready on return."""
    document = create_document(
        tenant=kb.tenant,
        knowledge_base=kb,
        name=name,
        stream=io.BytesIO(text.encode()),
        queue=False,
        **kwargs,
    )
    assert process_document(document.pk) == Document.Status.READY, document.pk
    document.refresh_from_db()
    return document


MANUALS = {
    "pumps.md": "# Pump handbook\n\nThe P-100 centrifugal pump moves cooling water. "
    "Replace the mechanical seal when it drips.",
    "valves.md": "# Valve guide\n\nValve V-7 is a gate valve. Keep it closed during cleaning.",
    "sensors.md": "# Sensor notes\n\nThe TH01 sensor reports the casing temperature every "
    "minute and alarms above 85 degrees.",
    "传感器.md": "# 温度传感器\n\n温度传感器每六个月校准一次。校准时使用标准温度计。",
    "controller.txt": "The ZX 81 controller drives the conveyor belt.",
}


@pytest.fixture
def tenant():
    return TenantFactory()


@pytest.fixture
def manuals(tenant):
    """A hash-embedding knowledge base with five small manuals, English and Chinese."""
    kb = create_knowledge_base(
        tenant=tenant, name="Manuals", embedding=EmbeddingConfig(provider="hash", dimensions=64)
    )
    kb.documents_by_name = {name: add_document(kb, name, text) for name, text in MANUALS.items()}
    return kb
