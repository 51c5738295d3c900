"""The client package's REST client where the real API cannot be made to fail on demand: a
scripted HTTP server (tests/langchain/search_api.py) answers what each test needs, to show the
retries (Retry-After honoured, read timeouts retried for GETs only) and results that carry
fields this client does not know yet."""

import json

import anyio
import pytest
from rag_kb_client import AsyncClient, Client, RateLimited, ServiceUnavailable

from tests.fake_services import Scripted
from tests.langchain.search_api import ScriptedSearchAPI

KB = {"id": 3, "name": "Manuals", "description": "", "document_count": 5}
PAGE = json.dumps({"count": 1, "next": None, "previous": None, "results": [KB]}).encode()
HIT = {
    "rank": 1,
    "chunk_id": 7,
    "document_id": 2,
    "knowledge_base_id": 3,
    "document_title": "Pump handbook",
    "content": "Replace the seal.",
    "score": 1.0,
    "relevance": 0.83,
    "a_later_signal": 0.5,
}
RESULTS = json.dumps({"results": [HIT], "trace": {"mode_used": "hybrid"}}).encode()


@pytest.fixture
def scripted():
    with ScriptedSearchAPI() as server:
        yield server


def slow_down(seconds: str) -> Scripted:
    body = {"error": {"code": "throttled", "message": "slow down", "details": {}}}
    return Scripted(429, body=json.dumps(body).encode(), headers={"Retry-After": seconds})


def test_a_get_that_timed_out_is_asked_again(scripted):
    scripted.script = [Scripted(200, body=PAGE, held=True), Scripted(200, body=PAGE)]
    with Client(scripted.url, "rag_key", timeout=0.2, max_retries=1) as client:
        [kb] = client.list_knowledge_bases()
    assert (kb.id, kb.name, kb.document_count) == (3, "Manuals", 5)
    requests = scripted.wait_for_requests(2)
    assert [r["path"] for r in requests] == ["/api/v1/knowledge-bases?limit=500&offset=0"] * 2
    assert requests[0]["auth"] == "Bearer rag_key"


def test_a_search_that_timed_out_is_not_sent_again(scripted):
    scripted.script = [Scripted(200, body=RESULTS, held=True)]
    with (
        Client(scripted.url, "rag_key", timeout=0.2, max_retries=2) as client,
        pytest.raises(ServiceUnavailable, match=r"did not answer within 0\.2 s") as caught,
    ):
        client.search("seal", 3)
    assert caught.value.code == "timeout"
    assert len(scripted.wait_for_requests(1)) == 1


def test_the_async_client_waits_as_told_then_answers_typed_hits(scripted):
    scripted.script = [slow_down("0"), Scripted(200, body=RESULTS)]

    async def search():
        async with AsyncClient(scripted.url + "/api/v1/", "rag_key") as client:
            return await client.search("seal", knowledge_base_ids=[3, 4], top_k=2)

    result = anyio.run(search)
    [hit] = result.hits
    assert (hit.chunk_id, hit.relevance, hit.a_later_signal) == (7, 0.83, 0.5)
    assert result.trace == {"mode_used": "hybrid"}
    first, second = scripted.wait_for_requests(2)
    assert first["path"] == second["path"] == "/api/v1/search"
    assert json.loads(second["body"]) == {"query": "seal", "top_k": 2, "knowledge_base_ids": [3, 4]}


def test_a_rate_limit_that_outlasts_the_retries_says_when_to_come_back(scripted):
    scripted.script = [slow_down("0"), slow_down("0"), slow_down("7")]
    with (
        Client(scripted.url, "rag_key", max_retries=2) as client,
        pytest.raises(RateLimited, match="slow down") as caught,
    ):
        client.search("seal", 3)
    assert (caught.value.status, caught.value.retry_after) == (429, 7.0)
    assert len(scripted.requests) == 3
