"""The REST client against the live server: typed results, sync and async alike, prompt context
as the server formats it, and the API's refusals as typed exceptions."""

from __future__ import annotations

import sys

import pytest
from rag_kb_client import (
    AsyncClient,
    AuthenticationFailed,
    Client,
    Hit,
    InvalidRequest,
    NotFound,
    format_context,
)

QUERY = "mechanical seal of the P-100 pump"


@pytest.fixture
def client(server):
    with Client(server.url, server.api_key, timeout=server.timeout) as client:
        yield client


def test_nothing_of_the_server_is_loaded():
    import rag_kb_client.langchain  # noqa: F401

    loaded = {name.split(".")[0] for name in sys.modules}
    assert not loaded & {"django", "celery", "psycopg", "rest_framework", "retrieval"}


def test_knowledge_bases_are_listed(client, server):
    listed = {kb.id: kb for kb in client.list_knowledge_bases()}
    assert server.knowledge_base_id in listed
    assert listed[server.knowledge_base_id].ready_document_count >= 5
    assert client.get_knowledge_base(server.knowledge_base_id) == listed[server.knowledge_base_id]
    if server.hidden_knowledge_base_id is not None:
        assert server.hidden_knowledge_base_id not in listed


def test_search_answers_typed_hits(client, server):
    result = client.search(QUERY, server.knowledge_base_id, top_k=3, mode="hybrid")
    assert all(isinstance(hit, Hit) for hit in result.hits)
    assert [hit.rank for hit in result.hits] == list(range(1, len(result.hits) + 1))
    assert result.hits[0].document_title == "Pump handbook"
    assert "mechanical seal" in result.hits[0].content
    assert all(hit.relevance is None or 0 <= hit.relevance <= 1 for hit in result.hits)
    assert result.trace["mode_used"] == "hybrid"
    several = client.search(QUERY, knowledge_base_ids=[server.knowledge_base_id], top_k=3)
    assert [h.chunk_id for h in several.hits] == [h.chunk_id for h in result.hits]


async def test_the_async_client_answers_the_same(client, server):
    expected = client.search(QUERY, server.knowledge_base_id, top_k=3)
    async with AsyncClient(server.url, server.api_key, timeout=server.timeout) as async_client:
        result = await async_client.search(QUERY, server.knowledge_base_id, top_k=3)
        listed = await async_client.list_knowledge_bases()
    assert [(h.chunk_id, h.score) for h in result.hits] == [
        (h.chunk_id, h.score) for h in expected.hits
    ]
    assert server.knowledge_base_id in {kb.id for kb in listed}


def test_format_context_is_the_servers_context(client, server):
    for max_chars in (300, 6000):
        served = client.context(QUERY, server.knowledge_base_id, top_k=4, max_chars=max_chars)
        assert format_context(served.hits, max_chars) == served.context
    assert served.context.startswith("[1] Pump handbook")


def test_refusals_are_typed_and_carry_the_api_message(client, server):
    with pytest.raises(NotFound) as missing:
        client.search(QUERY, 10**9)
    assert (missing.value.status, missing.value.code) == (404, "not_found")
    assert str(missing.value).startswith("Knowledge base not found.")
    if server.hidden_knowledge_base_id is not None:
        with pytest.raises(NotFound) as hidden:
            client.search(QUERY, server.hidden_knowledge_base_id)
        assert str(hidden.value).split(" (")[0] == str(missing.value).split(" (")[0]
    with pytest.raises(InvalidRequest, match="top_k"):
        client.search(QUERY, server.knowledge_base_id, top_k=0)
    with pytest.raises(TypeError):
        client.search(QUERY, server.knowledge_base_id, colour="blue")
    with (
        Client(server.url, "rag_wrong_key", timeout=server.timeout) as stranger,
        pytest.raises(AuthenticationFailed, match="Invalid API key"),
    ):
        stranger.list_knowledge_bases()
