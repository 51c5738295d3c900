"""RemoteKnowledgeBaseRetriever over HTTP: the same documents as the local retriever, the
request the API expects, and a clear exception for every way a search can fail."""

import json
import socket
from datetime import UTC, datetime

import pytest
from pydantic import SecretStr, ValidationError
from rag_kb_client.errors import (
    AuthenticationFailed,
    InvalidSearch,
    KnowledgeBaseNotFound,
    PermissionDenied,
    RateLimited,
    RemoteSearchError,
    ServerError,
    ServiceUnavailable,
)
from rag_kb_client.langchain import RemoteKnowledgeBaseRetriever

from retrieval.langchain import KnowledgeBaseRetriever
from retrieval.search.types import Hit
from tests.fake_services import Scripted
from tests.langchain.conftest import make_manuals
from tests.langchain.search_api import ScriptedSearchAPI

QUERY = "mechanical seal of the P-100 pump"
HIT = Hit(
    chunk_id=7,
    document_id=3,
    knowledge_base_id=1,
    document_title="Pump handbook",
    content="Replace the mechanical seal when it drips.",
    score=1.0,
    metadata={"langchain_id": "pump-1", "team": "pumps"},
    original_filename="pumps.md",
)
RESULTS = json.dumps({"results": [HIT.to_dict()], "trace": {"mode_used": "hybrid"}}).encode()


@pytest.fixture
def scripted():
    """The API server answering only what a test scripts (no database behind it)."""
    with ScriptedSearchAPI() as server:
        yield server


def remote(server, **fields) -> RemoteKnowledgeBaseRetriever:
    values = {"base_url": server.url, "api_key": "rag_key"}
    if "knowledge_base_ids" not in fields:
        values["knowledge_base_id"] = 1
    return RemoteKnowledgeBaseRetriever(**{**values, **fields})


def decisions(trace: dict) -> tuple:
    """What a trace says was done (timings and cache tiers differ from call to call)."""
    return trace["mode_used"], trace["retrieval_path"], trace["weights"], trace["results"]


def test_remote_documents_are_the_local_ones(search_api, tenant):
    kb = make_manuals(tenant)
    local = KnowledgeBaseRetriever(tenant=tenant, knowledge_base_id=kb.pk).invoke(QUERY)
    documents = RemoteKnowledgeBaseRetriever(
        base_url=search_api.url,
        api_key=search_api.add_key(tenant),
        knowledge_base_id=kb.pk,
        timeout=search_api.timeout,
    ).invoke(QUERY)
    assert [(d.id, d.page_content) for d in documents] == [(d.id, d.page_content) for d in local]
    for theirs, ours in zip(documents, local, strict=True):
        trace, our_trace = theirs.metadata.pop("trace"), ours.metadata.pop("trace")
        assert theirs.metadata == ours.metadata
        assert decisions(trace) == decisions(our_trace)


def test_a_hit_maps_to_a_document_as_locally(scripted):
    scripted.script = [Scripted(200, body=RESULTS)]
    [document] = remote(scripted).invoke(QUERY)
    assert document.id == "pump-1" and document.page_content == HIT.content
    assert document.metadata["metadata"] == {"team": "pumps"}
    assert document.metadata["source"] == "pumps.md" and document.metadata["chunk_id"] == 7
    assert document.metadata["trace"] == {"mode_used": "hybrid"}


def test_the_request_is_the_api_contract(scripted):
    scripted.script = [Scripted(200, body=RESULTS), Scripted(200, body=RESULTS)]
    after = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    retriever = remote(
        scripted,
        base_url=scripted.url + "/api/v1/",
        api_key="rag_secret",
        k=3,
        mode="keyword",
        vector_weight=0.2,
        keyword_weight=0.8,
        score_threshold=0.1,
        rerank=True,
        filters={"metadata": {"team": "pumps"}, "created_after": after},
    )
    retriever.invoke("seal", k=4)
    request = scripted.requests[0]
    assert request["path"] == "/api/v1/knowledge-bases/1/search"
    assert request["auth"] == "Bearer rag_secret"
    assert json.loads(request["body"]) == {
        "query": "seal",
        "top_k": 4,
        "mode": "keyword",
        "vector_weight": 0.2,
        "keyword_weight": 0.8,
        "score_threshold": 0.1,
        "filters": {"metadata": {"team": "pumps"}, "created_after": "2024-01-02T03:04:05+00:00"},
        "rerank": True,
        "explain": True,
    }
    remote(scripted, knowledge_base_ids=[1, 2], explain=False).invoke("seal")
    request = scripted.requests[1]
    assert request["path"] == "/api/v1/search"
    assert json.loads(request["body"]) == {
        "query": "seal",
        "knowledge_base_ids": [1, 2],
        "explain": False,
    }
    assert "rag_secret" not in repr(retriever)


def test_top_k_is_taken_for_k_and_a_misspelt_option_is_refused(scripted):
    scripted.script = [Scripted(200, body=RESULTS), Scripted(200, body=RESULTS)]
    retriever = remote(scripted, top_k=3)
    assert retriever.k == 3
    retriever.invoke("seal")
    retriever.invoke("seal", top_k=2)
    assert [json.loads(r["body"])["top_k"] for r in scripted.requests] == [3, 2]
    with pytest.raises(ValidationError, match="topk") as refused:
        remote(scripted, api_key="rag_do_not_echo", topk=3)
    assert "rag_do_not_echo" not in str(refused.value)
    with pytest.raises(ValidationError, match="k or top_k"):
        remote(scripted, k=3, top_k=3)
    with pytest.raises(TypeError, match="k or top_k"):
        retriever.invoke("seal", k=1, top_k=1)
    assert len(scripted.requests) == 2


def error(status: int, code: str, message: str, **headers) -> Scripted:
    body = json.dumps({"error": {"code": code, "message": message, "details": {"x": 1}}})
    return Scripted(status, body=body.encode(), headers=headers)


@pytest.mark.parametrize(
    ("answer", "exception", "message", "attempts"),
    [
        (error(400, "invalid", "top_k must be between 1 and 100"), InvalidSearch, "top_k", 1),
        (error(401, "authentication_failed", "invalid key"), AuthenticationFailed, "invalid", 1),
        (error(403, "permission_denied", "read scope needed"), PermissionDenied, "scope", 1),
        (error(404, "not_found", "knowledge base 1 not found"), KnowledgeBaseNotFound, "1 n", 1),
        (error(429, "throttled", "slow down", **{"Retry-After": "0"}), RateLimited, "slow", 3),
        (error(503, "unavailable", "maintenance", **{"Retry-After": "0"}), ServerError, "ma", 3),
        (error(500, "server_error", "boom"), ServerError, "boom", 1),
        (
            Scripted(502, body=b"<html>Bad gateway</html>", headers={"Retry-After": "0"}),
            ServerError,
            "Bad gateway",
            3,
        ),
        (Scripted(200, body=b"not json"), ServerError, "unexpected body", 1),
    ],
)
def test_failures_raise_clear_errors(scripted, answer, exception, message, attempts):
    scripted.script = [answer] * attempts
    with pytest.raises(exception, match=message) as caught:
        remote(scripted).invoke(QUERY)
    assert isinstance(caught.value, RemoteSearchError)
    assert f"HTTP {answer.status}" in str(caught.value) or answer.status == 200
    assert f"POST {scripted.url}/api/v1/knowledge-bases/1/search" in str(caught.value)
    assert len(scripted.requests) == attempts


def test_details_and_retry_after_are_kept(scripted):
    scripted.script = [error(429, "throttled", "slow down", **{"Retry-After": "0"})]
    with pytest.raises(RateLimited) as caught:
        remote(scripted, max_retries=0).invoke(QUERY)
    assert (caught.value.status, caught.value.code) == (429, "throttled")
    assert caught.value.details == {"x": 1} and caught.value.retry_after == 0.0


def test_a_transient_failure_is_retried(scripted):
    scripted.script = [error(503, "unavailable", "restart", **{"Retry-After": "0"})]
    scripted.script.append(Scripted(200, body=RESULTS))
    assert [d.id for d in remote(scripted).invoke(QUERY)] == ["pump-1"]
    assert len(scripted.requests) == 2


def test_a_slow_api_times_out(scripted):
    scripted.script = [Scripted(200, body=RESULTS, held=True)]  # answered after the test
    with pytest.raises(ServiceUnavailable, match=r"did not answer within 0\.2 s"):
        remote(scripted, timeout=0.2).invoke(QUERY)
    # A search that may be running is not sent twice. (The server may record the request a
    # moment after the client gave up on it: wait for it, then count.)
    assert len(scripted.wait_for_requests(1)) == 1


def test_an_unreachable_api_is_a_clear_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    retriever = RemoteKnowledgeBaseRetriever(
        base_url=f"http://127.0.0.1:{port}", api_key="k", knowledge_base_id=1, max_retries=0
    )
    with pytest.raises(ServiceUnavailable, match="could not reach the search API"):
        retriever.invoke(QUERY)


async def test_async_searches_and_errors(scripted):
    scripted.script = [Scripted(200, body=RESULTS), error(404, "not_found", "no such base")]
    assert [d.id for d in await remote(scripted).ainvoke(QUERY)] == ["pump-1"]
    with pytest.raises(KnowledgeBaseNotFound, match="no such base"):
        await remote(scripted).ainvoke(QUERY)
    scripted.script = [Scripted(200, body=RESULTS, held=True)]
    with pytest.raises(ServiceUnavailable, match=r"within 0\.2 s"):
        await remote(scripted, timeout=0.2).ainvoke(QUERY)


def test_an_invalid_search_is_refused_by_the_real_search(search_api, tenant):
    kb = make_manuals(tenant)
    retriever = RemoteKnowledgeBaseRetriever(
        base_url=search_api.url,
        api_key=search_api.add_key(tenant),
        knowledge_base_id=kb.pk,
        timeout=search_api.timeout,
    )
    with pytest.raises(InvalidSearch, match='mode: "semantic" is not a valid choice'):
        retriever.invoke(QUERY, mode="semantic")
    stranger = retriever.model_copy(update={"api_key": SecretStr("rag_wrong")})
    with pytest.raises(AuthenticationFailed, match="Invalid API key"):
        stranger.invoke(QUERY)


def test_a_key_without_the_read_scope_or_over_its_rate_is_told_so(search_api, tenant, settings):
    kb = make_manuals(tenant)
    writer = RemoteKnowledgeBaseRetriever(
        base_url=search_api.url,
        api_key=search_api.add_key(tenant, scopes=("write",)),
        knowledge_base_id=kb.pk,
        timeout=search_api.timeout,
    )
    with pytest.raises(PermissionDenied, match="HTTP 403"):
        writer.invoke(QUERY)
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"api_key": "1/min", "user": "1/min"},
    }
    reader = writer.model_copy(
        update={"api_key": SecretStr(search_api.add_key(tenant)), "max_retries": 0}
    )
    assert len(reader.invoke(QUERY, k=1)) == 1
    with pytest.raises(RateLimited, match="HTTP 429") as caught:
        reader.invoke(QUERY, k=1)
    assert 0 < caught.value.retry_after <= 60
