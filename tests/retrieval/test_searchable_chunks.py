"""The searchable-chunk rule (``knowledge.selectors.SEARCHABLE_CHUNK``): a disabled chunk and a
disabled document are never returned, by any entry point (REST search and context, multi-KB
search, Dify, LangChain retriever and vector store, admin hit testing), nor held by the stores
search reads (BM25 build, vector matrix, HNSW, filters); and an edited chunk is found by its new
words on the next query, by keyword and by vector, and no longer by its old ones."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from knowledge.embeddings import EmbeddingConfig
from knowledge.models import Chunk
from knowledge.services.curation import ChunkChanges, set_document_enabled, update_chunk
from knowledge.services.knowledge_bases import create_knowledge_base
from retrieval.bm25store.fetch import fetch_segments
from retrieval.core.filter_sql import allowed_chunk_ids
from retrieval.langchain import KnowledgeBaseRetriever, KnowledgeBaseVectorStore
from retrieval.search import RAGService
from retrieval.search.types import SearchFilters
from retrieval.vector.hnsw import vector_search
from retrieval.vector.matrix import load
from tests.conftest import API, bearer
from tests.factories import MembershipFactory, UserFactory, add_document

pytestmark = pytest.mark.django_db

WORD = "zirconium"  # in one chunk of one document only
DOCS = {
    "alloys.md": f"# Alloys\n\nThe {WORD} gasket resists hot acid in the mixing tank.",
    "pumps.md": "# Pumps\n\nThe P-100 pump moves cooling water; replace its seal yearly.",
    "valves.md": "# Valves\n\nValve V-7 closes the acid line when the tank overflows.",
}


@pytest.fixture
def kb(tenant):
    kb = create_knowledge_base(
        tenant=tenant, name="Plant", embedding=EmbeddingConfig(provider="hash", dimensions=64)
    )
    kb.docs = {name: add_document(kb, name, text) for name, text in DOCS.items()}
    kb.target = Chunk.objects.get(document=kb.docs["alloys.md"])
    return kb


@pytest.fixture
def other_kb(tenant):
    kb = create_knowledge_base(
        tenant=tenant, name="Other", embedding=EmbeddingConfig(provider="hash", dimensions=64)
    )
    add_document(kb, "other.md", "# Other\n\nNothing about gaskets here, only conveyor belts.")
    return kb


def disable_chunk(kb) -> None:
    update_chunk(tenant=kb.tenant, chunk=kb.target, changes=ChunkChanges(enabled=False))


def disable_document(kb) -> None:
    set_document_enabled(tenant=kb.tenant, document=kb.docs["alloys.md"], enabled=False)


def found_by_every_entry_point(kb, other_kb, client, admin_client) -> dict[str, bool]:
    """Whether the target chunk (or its document) comes back from each entry point."""
    query = f"{WORD} gasket"
    doc_id = kb.docs["alloys.md"].pk
    found = {}
    for mode in ("keyword", "vector", "hybrid"):
        result = RAGService(kb.tenant).search(query, kb.pk, mode=mode, top_k=10)
        found[f"service {mode}"] = any(h.chunk_id == kb.target.pk for h in result.hits)
    body = {"query": query, "top_k": 10}
    hits = client.post(f"{API}/knowledge-bases/{kb.pk}/search", body, format="json").json()
    found["rest search"] = any(h["chunk_id"] == kb.target.pk for h in hits["results"])
    context = client.post(f"{API}/knowledge-bases/{kb.pk}/context", body, format="json").json()
    found["rest context"] = WORD in str(context)
    multi = {**body, "knowledge_base_ids": [other_kb.pk, kb.pk]}
    hits = client.post(f"{API}/search", multi, format="json").json()
    found["multi-kb search"] = any(h["chunk_id"] == kb.target.pk for h in hits["results"])
    context = client.post(f"{API}/context", multi, format="json").json()
    found["multi-kb context"] = WORD in str(context)
    dify = {
        "knowledge_id": str(kb.pk),
        "query": query,
        "retrieval_setting": {"top_k": 10, "score_threshold": 0},
    }
    records = client.post(f"{API}/dify/retrieval", dify, format="json").json()["records"]
    found["dify"] = any(WORD in r["content"] for r in records)
    retriever = KnowledgeBaseRetriever(tenant=kb.tenant, knowledge_base_id=kb.pk, k=10)
    found["langchain retriever"] = any(WORD in d.page_content for d in retriever.invoke(query))
    store = KnowledgeBaseVectorStore(kb.tenant, kb)
    found["langchain vector store"] = any(
        WORD in d.page_content for d in store.similarity_search(query, k=10)
    )
    found["langchain get_by_ids"] = any(
        WORD in d.page_content for d in store.get_by_ids([str(doc_id)])
    )
    page = admin_client.get(
        reverse("admin:knowledge_knowledgebase_hit_testing", args=[kb.pk]),
        {"q": query, "mode": "hybrid"},
    ).content.decode()
    found["admin hit testing"] = str(kb.target.pk) in re.findall(r'data-chunk="(\d+)"', page)
    return found


def stores_hold(kb) -> dict[str, bool]:
    """Whether each store search reads holds the target chunk."""
    kb.refresh_from_db()
    ids = {chunk_id for segment in fetch_segments(kb) for chunk_id in segment.doc_ids.tolist()}
    matrix, _ = load(kb, None, 1 << 30)
    filters = SearchFilters.from_dict({"metadata": {}})
    vector = [1.0] * 64
    return {
        "bm25 build": kb.target.pk in ids,
        "vector matrix": kb.target.pk in set(matrix.live_rows()[0].tolist()),
        "hnsw": kb.target.pk
        in {
            chunk_id
            for chunk_id, _ in vector_search(
                tenant_id=kb.tenant_id,
                knowledge_base_id=kb.pk,
                model=kb.embedding_model,
                dimensions=64,
                query_vector=vector,
                limit=50,
                filters=filters,
            )
        },
        "filters": kb.target.pk in set(allowed_chunk_ids(kb.tenant_id, kb.pk, filters).tolist()),
    }


@pytest.fixture
def clients(kb, make_key):
    user = UserFactory(is_staff=True)
    MembershipFactory(user=user, tenant=kb.tenant)
    from django.test import Client

    admin_client = Client()
    admin_client.force_login(user)
    return bearer(make_key(kb.tenant)), admin_client


@pytest.mark.parametrize("disable", [disable_chunk, disable_document], ids=["chunk", "document"])
def test_disabled_is_never_returned_by_any_entry_point_and_enabling_restores_it(
    kb, other_kb, clients, disable
):
    client, admin_client = clients
    before = found_by_every_entry_point(kb, other_kb, client, admin_client)
    assert all(before.values()), before  # the test can fail: everything finds it at first
    assert all(stores_hold(kb).values())

    disable(kb)
    after = found_by_every_entry_point(kb, other_kb, client, admin_client)
    assert not any(after.values()), after
    assert not any(stores_hold(kb).values()), stores_hold(kb)
    # kept: the chunk and its document are still there, listed as disabled
    listed = client.get(f"{API}/documents/{kb.docs['alloys.md'].pk}/chunks").json()["results"]
    assert [c["content"] for c in listed] == [kb.target.content]

    if disable is disable_chunk:
        update_chunk(tenant=kb.tenant, chunk=kb.target, changes=ChunkChanges(enabled=True))
    else:
        set_document_enabled(tenant=kb.tenant, document=kb.docs["alloys.md"], enabled=True)
    again = found_by_every_entry_point(kb, other_kb, client, admin_client)
    assert all(again.values()), again


@pytest.mark.parametrize("mode", ["keyword", "vector"])
def test_an_edited_chunk_is_found_by_its_new_words_on_the_next_query_not_its_old(kb, mode):
    service = RAGService(kb.tenant)

    def hits(query: str) -> list[int]:
        return [h.chunk_id for h in service.search(query, kb.pk, mode=mode, top_k=10).hits]

    assert hits(f"{WORD} gasket")[0] == kb.target.pk
    assert kb.target.pk not in hits("hafnium flange")[:1]
    [first] = service.search(WORD, kb.pk, mode=mode, top_k=1).hits
    similarity_before = first.vector_similarity or 1.0  # keyword mode: unused
    update_chunk(
        tenant=kb.tenant,
        chunk=kb.target,
        changes=ChunkChanges(content="The hafnium flange seals the reactor lid."),
    )
    assert hits("hafnium flange")[0] == kb.target.pk
    old = {h.chunk_id: h for h in service.search(WORD, kb.pk, mode=mode, top_k=10).hits}
    if mode == "keyword":
        assert kb.target.pk not in old  # no chunk holds the word any more
    else:
        # the vector leg ranks every chunk; the old word no longer resembles this one's vector
        assert old[kb.target.pk].vector_similarity < 0.1 < similarity_before
