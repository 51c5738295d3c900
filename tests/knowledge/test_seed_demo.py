"""The demo data `make run` loads: tenant, admin, and the sample documents, idempotently."""

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from knowledge.models import Document, KnowledgeBase
from tenancy.models import Membership

pytestmark = pytest.mark.django_db


def test_seed_demo_loads_the_sample_documents_once(monkeypatch):
    monkeypatch.setenv("RAG_DEMO_PASSWORD", "a-long-demo-password")
    out = io.StringIO()
    call_command("seed_demo", "--sync", stdout=out)
    assert "(from RAG_DEMO_PASSWORD)" in out.getvalue()
    user = get_user_model().objects.get(username="admin")
    assert user.check_password("a-long-demo-password") and user.is_superuser
    assert Membership.objects.get(user=user).role == "owner"

    kb = KnowledgeBase.objects.get(name="Demo knowledge base")
    documents = Document.objects.filter(knowledge_base=kb)
    assert documents.count() == 5
    assert set(documents.values_list("status", flat=True)) == {"ready"}
    assert "传感器手册.md" in set(documents.values_list("original_filename", flat=True))

    monkeypatch.setenv("RAG_DEMO_PASSWORD", "another-password")
    out = io.StringIO()
    call_command("seed_demo", "--sync", stdout=out)
    assert "password is unchanged" in out.getvalue()
    assert get_user_model().objects.get(username="admin").check_password("a-long-demo-password")
    assert Document.objects.filter(knowledge_base=kb).count() == 5
