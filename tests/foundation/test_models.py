"""Constraints that belong to the data model hold in the database itself."""

import pytest
from django.db import IntegrityError, connection, transaction

from knowledge.models import KnowledgeBase
from tests.factories import KnowledgeBaseFactory, TenantFactory

pytestmark = pytest.mark.django_db


def test_knowledge_base_names_are_unique_per_tenant_not_globally():
    first, second = TenantFactory(), TenantFactory()
    KnowledgeBaseFactory(tenant=first, name="Manuals")
    KnowledgeBaseFactory(tenant=second, name="Manuals")  # another tenant may reuse the name
    with pytest.raises(IntegrityError), transaction.atomic():
        KnowledgeBaseFactory(tenant=first, name="Manuals")
    assert KnowledgeBase.objects.filter(name="Manuals").count() == 2


def test_chunk_overlap_must_stay_below_chunk_size():
    with pytest.raises(IntegrityError), transaction.atomic():
        KnowledgeBaseFactory(chunk_size=200, chunk_overlap=200)


def test_search_paths_are_indexed():
    with connection.cursor() as cursor:
        cursor.execute(
            "select indexname, indexdef from pg_indexes where tablename in "
            "('knowledge_chunk', 'knowledge_document')"
        )
        indexes = dict(cursor.fetchall())
    assert "(tenant_id, knowledge_base_id)" in indexes["chunk_tenant_kb"]
    assert "USING gin (metadata)" in indexes["document_metadata_gin"]
