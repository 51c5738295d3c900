"""KnowledgeBaseRetriever and get_retriever: RAGService's hybrid search with every option, as
LangChain documents carrying scores, citation fields and the trace."""

from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone
from langchain_core.vectorstores import VectorStoreRetriever
from pydantic import ValidationError

from retrieval.langchain import KnowledgeBaseRetriever, KnowledgeBaseVectorStore, get_retriever
from retrieval.search import InvalidSearch, KnowledgeBaseNotFound, RAGService
from retrieval.search.types import SearchFilters
from tests.factories import add_document
from tests.fake_services import FakeRerankServer
from tests.langchain.conftest import make_manuals

pytestmark = pytest.mark.django_db

QUERY = "mechanical seal of the P-100 pump"


def expected(tenant, kb_ids, query=QUERY, **options):
    """What RAGService itself answers, in the shape the retrievers promise."""
    result = RAGService(tenant).search_multiple_knowledge_bases(query, kb_ids, **options)
    return [(str(hit.document_id), hit.content, hit.score) for hit in result.hits]


def shape(documents):
    return [(d.id, d.page_content, d.metadata["score"]) for d in documents]


def test_documents_carry_scores_citations_and_trace(manuals):
    retriever = KnowledgeBaseRetriever(tenant=manuals.tenant, knowledge_base_id=manuals.pk)
    documents = retriever.invoke(QUERY)
    result = RAGService(manuals.tenant).search(QUERY, manuals.pk)
    assert len(documents) == len(result.hits) == 5
    first, hit = documents[0], result.hits[0]
    assert first.id == str(manuals.documents_by_name["pumps.md"].pk)
    assert first.page_content == hit.content
    signals = {k: v for k, v in hit.to_dict().items() if k != "content"} | {"rank": 1}
    assert {k: v for k, v in first.metadata.items() if k not in ("source", "trace")} == signals
    assert first.metadata["document_title"] == "Pump handbook"
    assert first.metadata["source"] == "pumps.md"
    assert first.metadata["heading_path"] == ["Pump handbook"]
    assert first.metadata["vector_rank"] == 1 and first.metadata["bm25_rank"] == 1
    trace = first.metadata["trace"]
    assert trace["mode_used"] == "hybrid" and trace["results"] == 5
    assert trace["knowledge_bases"][0]["knowledge_base_id"] == manuals.pk
    assert all(d.metadata["trace"] is trace for d in documents)


def test_every_search_option_reaches_the_search(manuals):
    tenant, kb = manuals.tenant, manuals.pk
    pump = manuals.documents_by_name["pumps.md"].pk
    valve = manuals.documents_by_name["valves.md"].pk
    cases = [
        {"k": 2},
        {"mode": "keyword"},
        {"mode": "vector"},
        {"vector_weight": 0.0, "keyword_weight": 1.0},
        {"score_threshold": 0.5},
        {"filters": {"document_ids": [pump, valve]}},
        {"candidate_multiplier": 1, "k": 1},
    ]
    for options in cases:
        retriever = KnowledgeBaseRetriever(tenant=tenant, knowledge_base_id=kb, **options)
        search = {("top_k" if k == "k" else k): v for k, v in options.items()}
        if "filters" in search:
            search["filters"] = SearchFilters.from_dict(search["filters"])
        assert shape(retriever.invoke(QUERY)) == expected(tenant, [kb], **search), options
    keyword = KnowledgeBaseRetriever(tenant=tenant, knowledge_base_id=kb, mode="keyword")
    assert keyword.invoke(QUERY)[0].metadata["trace"]["mode_used"] == "keyword"
    assert keyword.invoke(QUERY)[0].metadata["vector_similarity"] is None


def test_options_can_be_given_per_call(manuals):
    retriever = KnowledgeBaseRetriever(tenant=manuals.tenant, knowledge_base_id=manuals.pk, k=5)
    documents = retriever.invoke(QUERY, k=1, mode="keyword")
    assert shape(documents) == expected(manuals.tenant, [manuals.pk], top_k=1, mode="keyword")
    with pytest.raises(TypeError, match="unknown search options: top_n"):
        retriever.invoke(QUERY, top_n=3)
    assert shape(retriever.invoke(QUERY, top_k=1)) == shape(retriever.invoke(QUERY, k=1))
    with pytest.raises(InvalidSearch, match="mode must be one of"):
        retriever.invoke(QUERY, mode="semantic")


def test_top_k_is_taken_for_k_and_a_misspelt_option_is_refused(manuals):
    tenant, kb = manuals.tenant, manuals.pk
    by_top_k = KnowledgeBaseRetriever(tenant=tenant, knowledge_base_id=kb, top_k=2)
    assert by_top_k.k == 2 and shape(by_top_k.invoke(QUERY)) == expected(tenant, [kb], top_k=2)
    with pytest.raises(ValidationError, match="topk"):
        KnowledgeBaseRetriever(tenant=tenant, knowledge_base_id=kb, topk=2)
    with pytest.raises(ValidationError, match="k or top_k"):
        KnowledgeBaseRetriever(tenant=tenant, knowledge_base_id=kb, k=2, top_k=2)


def test_metadata_and_date_filters(manuals):
    gaskets = add_document(
        manuals,
        "gaskets.md",
        "# Gasket notes\n\nValve gaskets are replaced every year.",
        metadata={"team": "valves"},
    )
    only = {"metadata": {"team": "valves"}}
    retriever = KnowledgeBaseRetriever(
        tenant=manuals.tenant, knowledge_base_id=manuals.pk, filters=only
    )
    assert [d.id for d in retriever.invoke("valve")] == [str(gaskets.pk)]
    assert retriever.invoke("valve")[0].metadata["metadata"] == {"team": "valves"}
    future = (timezone.now() + timedelta(days=1)).isoformat()
    assert retriever.invoke("valve", filters={**only, "created_after": future}) == []


def test_rerank_scores_reach_the_documents(manuals, settings):
    with FakeRerankServer("cohere") as server:
        settings.RERANK_PROVIDER = "http"
        settings.RERANK_BASE_URL = server.base_url
        settings.RERANK_MODEL = "rerank-test"
        retriever = KnowledgeBaseRetriever(
            tenant=manuals.tenant, knowledge_base_id=manuals.pk, mode="keyword", rerank=True
        )
        documents = retriever.invoke("pump valve sensor", rerank_top_n=2)
    assert documents[0].metadata["trace"]["rerank"]["ran"] is True
    assert documents[0].metadata["trace"]["rerank"]["head"] == 2
    assert [d.metadata["rerank_score"] is not None for d in documents][:3] == [True, True, False]
    assert len(server.requests) == 1


def test_several_knowledge_bases_are_searched_together(tenant):
    first, second = make_manuals(tenant, "First"), make_manuals(tenant, "Second")
    retriever = KnowledgeBaseRetriever(
        tenant=tenant, knowledge_base_ids=[first.pk, second.pk], k=10
    )
    documents = retriever.invoke(QUERY)
    assert {d.metadata["knowledge_base_id"] for d in documents} == {first.pk, second.pk}
    assert shape(documents) == expected(tenant, [first.pk, second.pk], top_k=10)
    with pytest.raises(ValueError, match="not both"):
        KnowledgeBaseRetriever(tenant=tenant, knowledge_base_id=1, knowledge_base_ids=[2])


async def test_async_invoke_gives_the_same_documents(manuals):
    retriever = KnowledgeBaseRetriever(tenant=manuals.tenant, knowledge_base_id=manuals.pk, k=3)
    documents = await retriever.ainvoke(QUERY)
    assert shape(documents) == await sync_to_async(expected)(manuals.tenant, [manuals.pk], top_k=3)


def test_a_missing_knowledge_base_is_a_clear_error(manuals):
    retriever = KnowledgeBaseRetriever(tenant=manuals.tenant, knowledge_base_id=manuals.pk + 999)
    with pytest.raises(KnowledgeBaseNotFound, match=f"knowledge base {manuals.pk + 999} not"):
        retriever.invoke(QUERY)


def test_get_retriever_is_a_vector_store_retriever_running_the_hybrid_search(manuals):
    service = RAGService(manuals.tenant)
    retriever = service.get_retriever(knowledge_base_id=manuals.pk, k=2, mode="keyword")
    assert isinstance(retriever, VectorStoreRetriever)
    assert isinstance(retriever.vectorstore, KnowledgeBaseVectorStore)
    assert retriever.search_type == "hybrid"
    documents = retriever.invoke(QUERY)
    assert shape(documents) == expected(manuals.tenant, [manuals.pk], top_k=2, mode="keyword")
    assert documents[0].metadata["trace"]["mode_used"] == "keyword"
    plain = get_retriever(service, manuals.pk, search_type="similarity", k=1)
    [nearest] = plain.invoke("Valve V-7 is a gate valve")
    assert nearest.id == str(manuals.documents_by_name["valves.md"].pk)
    assert nearest.metadata == {}
    with pytest.raises(TypeError, match="unknown search options: fetch"):
        service.get_retriever(knowledge_base_id=manuals.pk, fetch=3)
