"""The seeds' calling conventions, as written: positional RAGService.search and
search_multiple_knowledge_bases with a user, get_retriever(user_id, knowledge_base_id, k), the
``use_rerank`` option and the ``exclude_chunk_ids`` filter, through Python, REST and LangChain."""

from __future__ import annotations

import pytest

from retrieval.langchain import KnowledgeBaseRetriever
from retrieval.search import InvalidSearch, KnowledgeBaseNotFound, RAGService
from tests.api.conftest import API, MANUALS, make_kb
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def people(tenant, other_tenant):
    return {
        "viewer": MembershipFactory(tenant=tenant, role="viewer").user,
        "outsider": MembershipFactory(tenant=other_tenant, role="owner").user,
        "nobody": UserFactory(),
    }


def test_search_takes_query_kb_user_top_k_and_threshold_by_position(tenant, kb, people):
    service = RAGService(tenant)
    result = service.search("pump seal", kb.pk, people["viewer"].pk, 1, 0.0)
    assert len(result.hits) == 1
    assert result.hits[0].document_title == "Pump handbook"
    # score_threshold, fifth by position, cuts relevance
    cut = [h.chunk_id for h in service.search("pump seal", kb.pk, people["viewer"].pk, 3, 0.5).hits]
    everything = service.search("pump seal", kb.pk, top_k=3).hits
    assert cut == [hit.chunk_id for hit in everything if hit.relevance >= 0.5]
    several = service.search_multiple_knowledge_bases("pump seal", [kb.pk], people["viewer"].pk, 2)
    assert [h.chunk_id for h in several.hits] == [
        h.chunk_id for h in service.search("pump seal", kb.pk, top_k=2).hits
    ]


@pytest.mark.parametrize("who", ["outsider", "nobody"])
def test_a_user_who_may_not_read_gets_the_not_found_of_a_missing_knowledge_base(
    tenant, kb, people, who
):
    service = RAGService(tenant)
    with pytest.raises(KnowledgeBaseNotFound) as refused:
        service.search("pump seal", kb.pk, people[who].pk)
    with pytest.raises(KnowledgeBaseNotFound) as missing:
        service.search("pump seal", kb.pk + 1000)
    assert str(refused.value) == str(missing.value).replace(str(kb.pk + 1000), str(kb.pk))
    with pytest.raises(KnowledgeBaseNotFound):
        service.search_multiple_knowledge_bases("pump seal", [kb.pk], people[who].pk, 3)
    with pytest.raises(KnowledgeBaseNotFound):
        service.get_retriever(people[who].pk, kb.pk, 3)


def test_get_retriever_takes_user_knowledge_base_and_k(tenant, kb, people):
    retriever = RAGService(tenant).get_retriever(people["viewer"].pk, kb.pk, 2)
    documents = retriever.invoke("temperature sensor")
    assert 1 <= len(documents) <= 2
    assert documents[0].metadata["knowledge_base_id"] == kb.pk


def test_use_rerank_false_returns_vector_results_only_and_true_fuses_3x_candidates(tenant, kb):
    service = RAGService(tenant)
    vector_only = service.search("pump seal", kb.pk, use_rerank=False).trace
    assert vector_only.retrieval_path == ["vector"]
    fused = service.search("pump seal", kb.pk, top_k=2, use_rerank=True).trace
    assert fused.retrieval_path == ["vector", "keyword", "fusion"]
    assert fused.vector.candidates <= 2 * 3 and fused.keyword.candidates <= 2 * 3
    with pytest.raises(InvalidSearch, match="contradicts mode=keyword"):
        service.search("pump seal", kb.pk, use_rerank=False, mode="keyword")
    with pytest.raises(InvalidSearch, match="contradicts mode=vector"):
        service.search("pump seal", kb.pk, use_rerank=True, mode="vector")


@pytest.mark.parametrize("mode", ["hybrid", "keyword", "vector"])
def test_excluded_chunks_are_never_returned(tenant, kb, mode):
    service = RAGService(tenant)
    first = service.search("pump seal", kb.pk, top_k=3, mode=mode).hits
    seen = [first[0].chunk_id]
    again = service.search(
        "pump seal", kb.pk, top_k=3, mode=mode, filters={"exclude_chunk_ids": seen}
    )
    returned = [hit.chunk_id for hit in again.hits]
    assert seen[0] not in returned
    assert returned == [h.chunk_id for h in first if h.chunk_id not in seen][: len(returned)]
    assert again.trace.filters == {"exclude_chunk_ids": seen}


def test_rest_takes_use_rerank_and_exclude_chunk_ids(client, kb):
    url = f"{API}/knowledge-bases/{kb.pk}/search"
    first = client.post(url, {"query": "pump seal", "top_k": 3}, format="json").json()
    seen = first["results"][0]["chunk_id"]
    body = {"query": "pump seal", "top_k": 3, "filters": {"exclude_chunk_ids": [seen]}}
    again = client.post(url, body, format="json")
    assert again.status_code == 200
    assert seen not in [hit["chunk_id"] for hit in again.json()["results"]]
    vector = client.post(url, {"query": "pump seal", "use_rerank": False}, format="json")
    assert vector.json()["trace"]["retrieval_path"] == ["vector"]
    bad = client.post(url, {"query": "x", "filters": {"exclude_chunk_ids": ["a"]}}, format="json")
    assert bad.status_code == 400


def test_the_langchain_retriever_takes_use_rerank_and_exclusions(tenant):
    kb = make_kb(tenant, "Other manuals", documents=MANUALS)
    retriever = KnowledgeBaseRetriever(tenant=tenant, knowledge_base_id=kb.pk, k=3)
    first = retriever.invoke("pump seal")
    seen = first[0].metadata["chunk_id"]
    again = retriever.invoke("pump seal", filters={"exclude_chunk_ids": [seen]})
    assert seen not in [d.metadata["chunk_id"] for d in again]
    vector = retriever.invoke("pump seal", use_rerank=False)
    assert vector and all(d.metadata.get("bm25_rank") is None for d in vector)
