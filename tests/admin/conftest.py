"""Two tenants with processed documents, and their staff, for the admin tests."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from knowledge.embeddings import EmbeddingConfig
from knowledge.models import Document, KnowledgeBase
from knowledge.services.knowledge_bases import create_knowledge_base
from tenancy.models import Membership, Tenant
from tests.factories import MembershipFactory, TenantFactory, UserFactory, add_document

PASSWORD = "correct horse battery staple"

MANUALS = {
    "sensors.md": "# Sensor notes\n\nThe TH01 sensor reports the casing temperature every "
    "minute and is calibrated every six months.",
    "pumps.md": "# Pump handbook\n\nThe P-100 centrifugal pump moves cooling water. "
    "Replace the mechanical seal when it drips.",
    "传感器.txt": "温度传感器每六个月校准一次。校准时使用标准温度计。",
}


def staff(tenant: Tenant | None, role: str = Membership.Role.OWNER, **extra):
    user = UserFactory(is_staff=True, **extra)
    if tenant is not None:
        MembershipFactory(user=user, tenant=tenant, role=role)
    return user


@dataclass
class World:
    tenant_a: Tenant
    tenant_b: Tenant
    kb_a: KnowledgeBase
    kb_b: KnowledgeBase
    docs_a: dict[str, Document]
    owner_a: object
    viewer_a: object
    owner_b: object
    outsider: object  # staff, member of no tenant
    superuser: object


@pytest.fixture
def world(db) -> World:
    tenant_a, tenant_b = TenantFactory(name="Acme"), TenantFactory(name="Bolt")
    hashing = EmbeddingConfig(provider="hash", dimensions=32)
    kb_a = create_knowledge_base(tenant=tenant_a, name="Acme manuals", embedding=hashing)
    kb_b = create_knowledge_base(tenant=tenant_b, name="Bolt notes", embedding=hashing)
    docs_a = {name: add_document(kb_a, name, text) for name, text in MANUALS.items()}
    add_document(kb_b, "bolt.md", "# Bolts\n\nBolt B-7 holds the cover.")
    return World(
        tenant_a=tenant_a,
        tenant_b=tenant_b,
        kb_a=kb_a,
        kb_b=kb_b,
        docs_a=docs_a,
        owner_a=staff(tenant_a),
        viewer_a=staff(tenant_a, Membership.Role.VIEWER),
        owner_b=staff(tenant_b),
        outsider=staff(None),
        superuser=UserFactory(is_staff=True, is_superuser=True),
    )


@pytest.fixture
def eager_tasks(django_capture_on_commit_callbacks):
    """Celery tasks run inline, and ``with eager_tasks():`` runs the on_commit callbacks of its
    block (the test transaction never commits): what a worker would do, in this process."""
    from rag_project.celery import app

    app.conf.task_always_eager = True
    yield lambda: django_capture_on_commit_callbacks(execute=True)
    app.conf.task_always_eager = False
