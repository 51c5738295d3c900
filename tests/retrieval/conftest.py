"""Knowledge bases with real processed documents for retrieval tests."""

import pytest

from knowledge.embeddings import EmbeddingConfig
from knowledge.services.knowledge_bases import create_knowledge_base
from tests.factories import add_document

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
def manuals(tenant):
    """A hash-embedding knowledge base with five small manuals, English and Chinese."""
    kb = create_knowledge_base(
        tenant=tenant, name="Manuals", embedding=EmbeddingConfig(provider="hash", dimensions=64)
    )
    kb.documents_by_name = {name: add_document(kb, name, text) for name, text in MANUALS.items()}
    return kb
