"""Tenant isolation through every LangChain entry point: another tenant's knowledge base cannot
be opened, searched, read or written, and looks exactly like a missing one; its chunks never
come back, even where both tenants use the same embedding model."""

import pytest
from rag_kb_client.errors import KnowledgeBaseNotFound as RemoteNotFound
from rag_kb_client.langchain import RemoteKnowledgeBaseRetriever

from knowledge.models import Document
from retrieval.langchain import (
    KnowledgeBaseRetriever,
    KnowledgeBaseVectorStore,
    create_search_tool,
)
from retrieval.search import KnowledgeBaseNotFound, RAGService
from tests.langchain.conftest import make_manuals

QUERY = "mechanical seal of the P-100 pump"
SECRET = "The launch code of tenant B is 0000."


@pytest.fixture
def stores(tenant, other_tenant, embeddings):
    """Both tenants with a knowledge base of the same model, and B's text under an id A uses."""
    ours = KnowledgeBaseVectorStore.from_texts(
        ["The P-100 pump seal drips."], embeddings, ids=["shared"], tenant=tenant, name="A"
    )
    theirs = KnowledgeBaseVectorStore.from_texts(
        [SECRET], embeddings, ids=["shared"], tenant=other_tenant, name="B"
    )
    return ours, theirs


def their_pk(theirs) -> str:
    return str(Document.objects.get(knowledge_base_id=theirs.knowledge_base_id).pk)


@pytest.mark.django_db
def test_a_store_cannot_open_another_tenants_knowledge_base(stores, tenant, embeddings):
    _, theirs = stores
    missing = f"knowledge base {theirs.knowledge_base_id} not found"
    with pytest.raises(KnowledgeBaseNotFound, match=missing):
        KnowledgeBaseVectorStore(tenant, theirs.knowledge_base_id, embeddings)
    with pytest.raises(KnowledgeBaseNotFound, match=missing):
        KnowledgeBaseVectorStore.from_texts(
            ["x"], embeddings, tenant=tenant, knowledge_base=theirs.knowledge_base_id
        )


@pytest.mark.django_db
def test_a_store_never_reads_or_deletes_another_tenants_documents(stores):
    ours, theirs = stores
    assert [d.page_content for d in ours.similarity_search(SECRET, k=10)] == [
        "The P-100 pump seal drips."
    ]
    assert [d.page_content for d in ours.max_marginal_relevance_search(SECRET, k=10)] == [
        "The P-100 pump seal drips."
    ]
    assert ours.get_by_ids([their_pk(theirs)]) == []
    assert [d.page_content for d in ours.get_by_ids(["shared"])] == ["The P-100 pump seal drips."]
    ours.delete(["shared", their_pk(theirs)])
    assert [d.page_content for d in theirs.get_by_ids(["shared"])] == [SECRET]
    assert ours.get_by_ids(["shared"]) == []


@pytest.mark.django_db
def test_adding_an_id_another_tenant_uses_replaces_nothing_of_theirs(stores):
    ours, theirs = stores
    ours.add_texts(["Replaced in A only."], ids=["shared"])
    assert [d.page_content for d in theirs.get_by_ids(["shared"])] == [SECRET]


@pytest.mark.django_db
def test_retrievers_and_tools_cannot_reach_another_tenants_knowledge_base(stores, tenant):
    ours, theirs = stores
    retrievers = [
        KnowledgeBaseRetriever(tenant=tenant, knowledge_base_id=theirs.knowledge_base_id),
        KnowledgeBaseRetriever(
            tenant=tenant, knowledge_base_ids=[ours.knowledge_base_id, theirs.knowledge_base_id]
        ),
    ]
    for retriever in retrievers:
        with pytest.raises(KnowledgeBaseNotFound):
            retriever.invoke(SECRET)
        answer = create_search_tool(retriever).invoke({"query": SECRET})
        assert answer == f"Error: knowledge base {theirs.knowledge_base_id} not found"
    with pytest.raises(KnowledgeBaseNotFound):
        RAGService(tenant).get_retriever(knowledge_base_id=theirs.knowledge_base_id)
    hybrid = KnowledgeBaseRetriever(tenant=tenant, knowledge_base_id=ours.knowledge_base_id, k=10)
    assert SECRET not in {d.page_content for d in hybrid.invoke(SECRET)}


def test_the_remote_retriever_with_one_tenants_key_cannot_reach_anothers(
    search_api, tenant, other_tenant
):
    ours, theirs = make_manuals(tenant), make_manuals(other_tenant)
    key = search_api.add_key(tenant)
    retriever = RemoteKnowledgeBaseRetriever(
        base_url=search_api.url,
        api_key=key,
        knowledge_base_id=theirs.pk,
        timeout=search_api.timeout,
    )
    with pytest.raises(RemoteNotFound) as foreign:
        retriever.invoke(QUERY)
    assert foreign.value.status == 404
    missing = retriever.model_copy(update={"knowledge_base_ids": [theirs.pk + 1000]})
    with pytest.raises(RemoteNotFound) as absent:
        missing.invoke(QUERY)
    # Another tenant's knowledge base is indistinguishable from one that does not exist.
    # (Only the id in the path is replaced: the server's port may hold the same digits.)
    assert str(foreign.value).replace(f"bases/{theirs.pk}/", "bases/N/") == str(
        absent.value
    ).replace(f"bases/{theirs.pk + 1000}/", "bases/N/")
    both = retriever.model_copy(update={"knowledge_base_ids": [ours.pk, theirs.pk]})
    with pytest.raises(RemoteNotFound):
        both.invoke(QUERY)
    answer = create_search_tool(retriever).invoke({"query": QUERY})
    assert answer.startswith("Error: Knowledge base not found. (HTTP 404 not_found, POST")
    own = retriever.model_copy(update={"knowledge_base_ids": [ours.pk]}).invoke(QUERY, k=10)
    assert {d.metadata["knowledge_base_id"] for d in own} == {ours.pk}
