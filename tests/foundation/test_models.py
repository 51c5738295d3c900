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


def test_raw_reads_of_the_search_path_load_what_the_orm_loads():
    """knowledge_bases_by_id and find_api_key read rows on a plain cursor (rag_project.rawsql):
    every field, JSON decoded, as the ORM has it, and nothing of another tenant."""
    from knowledge.selectors import knowledge_bases_by_id
    from tenancy.selectors import find_api_key
    from tenancy.services import create_api_key

    tenant, other = TenantFactory(), TenantFactory()
    kb = KnowledgeBaseFactory(tenant=tenant, calibration={"legs": {"vector": [0.5, 1.25]}})
    foreign = KnowledgeBaseFactory(tenant=other)
    found = knowledge_bases_by_id(tenant, [kb.pk, foreign.pk, 10**9])
    assert list(found) == [kb.pk]
    orm = KnowledgeBase.objects.get(pk=kb.pk)
    for field in KnowledgeBase._meta.concrete_fields:
        assert getattr(found[kb.pk], field.attname) == getattr(orm, field.attname), field.name
    assert found[kb.pk].calibration == {"legs": {"vector": [0.5, 1.25]}}
    assert not found[kb.pk]._state.adding

    api_key, raw = create_api_key(tenant=tenant, name="reader", scopes=["read"])
    read = find_api_key(raw)
    assert (read.pk, read.scopes, read.tenant.slug) == (api_key.pk, ["read"], tenant.slug)
    assert find_api_key(raw[:-1] + ("A" if raw[-1] != "A" else "B")) is None
