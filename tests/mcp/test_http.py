"""The MCP server over streamable HTTP at /mcp, driven by the MCP SDK's own client: the tools it
lists, the same hits and context as the REST API for the same key and query, and every refusal
the REST API makes (restriction, scope, revocation, rate limit, bad arguments) as a tool error
with the REST API's message."""

import itertools
import threading

import httpx
import pytest

from tenancy.models import ApiKey
from tenancy.services import revoke_api_key
from tests.conftest import at_once
from tests.langchain.conftest import make_manuals
from tests.mcp.conftest import answer_of, error_of

QUERY = "mechanical seal of the P-100 pump"
TOOLS = {"list_knowledge_bases", "search", "get_context", "get_document"}


def test_the_tools_are_listed_with_what_they_return(live, tenant, make_key):
    key = make_key(tenant, scopes=("read",))

    async def listed(session):
        return (await session.list_tools()).tools

    tools = {tool.name: tool for tool in live.over_http(key, listed)}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert "Use it" in tool.description or "Call it" in tool.description
        assert tool.outputSchema["type"] == "object"
        assert tool.annotations.readOnlyHint
    hit = tools["search"].outputSchema["$defs"]["HitInfo"]
    assert {"relevance", "citation", "score", "chunk_id"} <= set(hit["properties"])
    assert tools["search"].inputSchema["required"] == ["query", "knowledge_base_ids"]


def test_search_answers_the_hits_of_the_rest_api(live, tenant, make_key):
    kb = make_manuals(tenant)
    other = make_manuals(tenant, name="Second manuals")
    key = make_key(tenant, scopes=("read",))

    async def calls(session):
        listed = await session.call_tool("list_knowledge_bases", {})
        one = await session.call_tool("search", {"query": QUERY, "knowledge_base_ids": [kb.pk]})
        both = await session.call_tool(
            "search", {"query": QUERY, "knowledge_base_ids": [kb.pk, other.pk], "top_k": 3}
        )
        return listed, one, both

    listed, one, both = live.over_http(key, calls)
    assert [
        (k["id"], k["name"], k["ready_document_count"])
        for k in answer_of(listed)["knowledge_bases"]
    ] == [(kb.pk, "Manuals", 5), (other.pk, "Second manuals", 5)]

    rest_one = live.rest(key, f"/knowledge-bases/{kb.pk}/search", {"query": QUERY}).json()
    rest_both = live.rest(
        key, "/search", {"query": QUERY, "knowledge_base_ids": [kb.pk, other.pk], "top_k": 3}
    ).json()
    for mcp_answer, rest in ((answer_of(one), rest_one), (answer_of(both), rest_both)):
        hits = mcp_answer["results"]
        assert hits, "the pump manual must be found"
        assert [(h["chunk_id"], h["score"], h["content"]) for h in hits] == [
            (h["chunk_id"], h["score"], h["content"]) for h in rest["results"]
        ]
        assert mcp_answer["trace"]["mode_used"] == rest["trace"]["mode_used"]
    first = answer_of(one)["results"][0]
    assert first["document_title"] == "Pump handbook"
    assert first["citation"] == "[1] Pump handbook (pumps.md)"
    assert "relevance" in first
    assert len(answer_of(both)["results"]) == 3


def test_get_context_is_the_rest_context_with_its_citations(live, tenant, make_key):
    kb = make_manuals(tenant)
    key = make_key(tenant, scopes=("read",))
    arguments = {"query": QUERY, "knowledge_base_ids": [kb.pk], "max_chars": 500}

    async def context(session):
        return await session.call_tool("get_context", arguments)

    answer = answer_of(live.over_http(key, context))
    rest = live.rest(key, f"/knowledge-bases/{kb.pk}/context", {"query": QUERY, "max_chars": 500})
    assert answer["context"] == rest.json()["context"]
    assert answer["context"].startswith("[1] Pump handbook")
    assert [c["number"] for c in answer["citations"]] == list(
        range(1, len(rest.json()["results"]) + 1)
    )
    assert answer["citations"][0]["chunk_id"] == rest.json()["results"][0]["chunk_id"]


def test_get_document_reads_the_chunks_around_a_hit(live, tenant, make_key):
    from knowledge.embeddings import EmbeddingConfig
    from knowledge.services.knowledge_bases import create_knowledge_base
    from tests.factories import add_document

    kb = create_knowledge_base(
        tenant=tenant,
        name="Long",
        chunk_size=100,
        chunk_overlap=0,
        embedding=EmbeddingConfig(provider="hash", dimensions=64),
    )
    text = "\n\n".join(
        f"Section {n}. The procedure step number {n} concerns valve {n} only." for n in range(12)
    )
    document = add_document(kb, "steps.md", text, metadata={"team": "ops"})
    chunks = list(document.chunks.order_by("position"))
    assert len(chunks) >= 6
    middle = chunks[3]
    key = make_key(tenant, scopes=("read",))

    async def read(session):
        around = await session.call_tool(
            "get_document", {"document_id": document.pk, "chunk_id": middle.pk, "window": 1}
        )
        start = await session.call_tool("get_document", {"document_id": document.pk})
        foreign = await session.call_tool(
            "get_document", {"document_id": document.pk, "chunk_id": 10**9}
        )
        return around, start, foreign

    around, start, foreign = live.over_http(key, read)
    answer = answer_of(around)
    assert answer["document"]["title"] == document.title
    assert answer["document"]["metadata"] == {"team": "ops"}
    assert [c["position"] for c in answer["chunks"]] == [2, 3, 4]
    assert answer["chunks"][1]["content"] == middle.content
    assert [c["position"] for c in answer_of(start)["chunks"]] == [0, 1, 2]
    assert error_of(foreign)["code"] == "not_found"


def test_a_knowledge_base_outside_the_restriction_is_missing(live, tenant, other_tenant, make_key):
    allowed, hidden = make_manuals(tenant), make_manuals(tenant, name="Hidden")
    foreign = make_manuals(other_tenant, name="Theirs")
    key = make_key(tenant, scopes=("read",), kbs=[allowed])
    missing = 10**9

    async def calls(session):
        listed = await session.call_tool("list_knowledge_bases", {})
        results = {}
        for name, kb_id in (("hidden", hidden.pk), ("foreign", foreign.pk), ("missing", missing)):
            results[name] = [
                await session.call_tool(tool, {"query": QUERY, "knowledge_base_ids": ids})
                for tool in ("search", "get_context")
                for ids in ([kb_id], [allowed.pk, kb_id])
            ]
        document = hidden.documents_by_name["pumps.md"]
        results["document"] = await session.call_tool("get_document", {"document_id": document.pk})
        return listed, results

    listed, results = live.over_http(key, calls)
    assert [kb["id"] for kb in answer_of(listed)["knowledge_bases"]] == [allowed.pk]

    def anonymous(error, kb_id):  # the id the caller gave is the only difference allowed
        return error["code"], error["message"].replace(str(kb_id), "ID"), error["details"]

    expected = [anonymous(error_of(r), missing) for r in results["missing"]]
    assert expected[0] == ("not_found", "Knowledge base not found.", {})
    assert expected[1] == ("not_found", "Knowledge base ID not found.", {})
    assert [anonymous(error_of(r), hidden.pk) for r in results["hidden"]] == expected
    assert [anonymous(error_of(r), foreign.pk) for r in results["foreign"]] == expected
    rest = live.rest(key, f"/knowledge-bases/{hidden.pk}/search", {"query": QUERY})
    assert rest.status_code == 404
    assert rest.json()["error"]["message"] == error_of(results["hidden"][0])["message"]
    assert error_of(results["document"]) == {
        "code": "not_found",
        "message": "Document not found.",
        "details": {},
    }


def test_a_key_without_the_read_scope_cannot_search(live, tenant, make_key):
    kb = make_manuals(tenant)
    key = make_key(tenant, scopes=("write",))

    async def calls(session):
        return [
            await session.call_tool("list_knowledge_bases", {}),
            await session.call_tool("search", {"query": QUERY, "knowledge_base_ids": [kb.pk]}),
        ]

    for result in live.over_http(key, calls):
        assert error_of(result) == {
            "code": "insufficient_scope",
            "message": "This API key lacks the 'read' scope.",
            "details": {},
        }


def test_bad_arguments_get_the_rest_api_message(live, tenant, make_key):
    kb = make_manuals(tenant)
    key = make_key(tenant, scopes=("read",))
    bad = {"query": QUERY, "top_k": 0}

    async def call(session):
        return [
            await session.call_tool("search", {**bad, "knowledge_base_ids": [kb.pk]}),
            await session.call_tool("search", {"query": QUERY}),
        ]

    out_of_range, missing = live.over_http(key, call)
    assert error_of(missing)["message"] == "knowledge_base_ids: Field required"
    rest = live.rest(key, f"/knowledge-bases/{kb.pk}/search", bad).json()["error"]
    assert error_of(out_of_range)["message"] == rest["message"]
    assert "top_k" in rest["message"]

    async def odd(session):
        return [
            await session.call_tool("list_knowledge_bases", {"colour": "blue"}),
            await session.call_tool("delete_everything", {}),
        ]

    extra, unknown = live.over_http(key, odd)
    assert error_of(extra) == {
        "code": "invalid",
        "message": "colour: Unexpected argument.",
        "details": {"fields": {"colour": ["Unexpected argument."]}},
    }
    assert error_of(unknown)["code"] == "unknown_tool"


def test_bodies_that_are_not_json_the_api_takes_answer_400_with_a_parse_error(
    live, tenant, make_key
):
    """What the SDK's own reading failed on (a server error) or took for null (NaN) is
    refused as the REST API refuses it, with the parse error the SDK answers to bad JSON."""
    kb = make_manuals(tenant)
    key = make_key(tenant, scopes=("read",))
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }

    def call(arguments: str) -> str:
        return (
            '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": '
            f'{{"name": "search", "arguments": {arguments}}}}}'
        )

    search = f'"query": "{QUERY}", "knowledge_base_ids": [{kb.pk}]'
    bodies = {
        "arrays 10,000 deep": ("[" * 10_000 + "]" * 10_000).encode(),
        "objects 10,000 deep": ('{"a":' * 10_000 + "1" + "}" * 10_000).encode(),
        "not UTF-8": call('{"query": "@@"}').encode().replace(b"@@", b"\xff\xfe"),
        "NaN": call(f'{{{search}, "score_threshold": NaN}}').encode(),
        "1e999": call(f'{{{search}, "filters": {{"metadata": {{"rev": 1e999}}}}}}').encode(),
        # named in the message by a key UTF-8 cannot encode
        "1e999 at \\ud800": call(
            f'{{{search}, "filters": {{"metadata": {{"\\ud800": 1e999}}}}}}'
        ).encode(),
    }
    messages = {}
    for name, body in bodies.items():
        response = httpx.post(live.mcp_url, content=body, headers=headers, timeout=60)
        assert response.status_code == 400, (name, response.text[:300])
        error = response.json()["error"]
        assert error["code"] == -32700, (name, error)
        messages[name] = error["message"]
    assert "nested at most 64 deep" in messages["arrays 10,000 deep"]
    assert "nested at most 64 deep" in messages["objects 10,000 deep"]
    assert "utf-8" in messages["not UTF-8"]
    assert "NaN" in messages["NaN"]
    assert messages["1e999"] == (
        "Parse error: params.arguments.filters.metadata.rev: A finite number is required."
    )
    assert messages["1e999 at \\ud800"] == (
        "Parse error: params.arguments.filters.metadata.\ud800: A finite number is required."
    )


def test_a_revoked_or_unknown_key_is_refused(live, tenant, make_key):
    key = make_key(tenant, scopes=("read",))
    revoke_api_key(tenant=tenant, api_key=ApiKey.objects.get(tenant=tenant))
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream"}
    for headers, message in (
        ({"Authorization": f"Bearer {key}"}, "This API key has been revoked."),
        ({"Authorization": "Bearer rag_nope_nope"}, "Invalid API key."),
        ({}, "Authentication credentials were not provided."),
    ):
        response = httpx.post(live.mcp_url, json=initialize, headers={**headers, **accept})
        assert response.status_code == 401
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        assert response.json()["error"]["message"] == message

    async def listed(session):
        return await session.list_tools()

    with pytest.raises(BaseException) as refused:  # the SDK client cannot even initialize
        live.over_http(key, listed)
    assert [error.response.status_code for error in leaves(refused.value)] == [401]


def leaves(error: BaseException) -> list[httpx.HTTPStatusError]:
    """The HTTP errors inside the SDK client's (possibly nested) exception groups."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error] if isinstance(error, httpx.HTTPStatusError) else []


def test_the_rate_limit_is_the_rest_api_counter(live, tenant, make_key, settings):
    kb = make_manuals(tenant)
    key = make_key(tenant, scopes=("read",))
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"api_key": "3/min", "user": "3/min"},
    }
    arguments = {"query": QUERY, "knowledge_base_ids": [kb.pk]}

    async def calls(session):
        return [await session.call_tool("search", arguments) for _ in range(3)]

    assert live.rest(key, f"/knowledge-bases/{kb.pk}/search", {"query": QUERY}).status_code == 200
    first, second, third = live.over_http(key, calls)
    answer_of(first), answer_of(second)
    error = error_of(third)
    assert error["code"] == "throttled"
    assert 0 < error["details"]["retry_after_s"] <= 60
    assert live.rest(key, f"/knowledge-bases/{kb.pk}/search", {"query": QUERY}).status_code == 429


def test_get_and_delete_answer_405_and_a_trailing_slash_works(live, tenant, make_key):
    key = make_key(tenant, scopes=("read",))
    headers = {"Authorization": f"Bearer {key}", "Accept": "text/event-stream"}
    for method in ("GET", "DELETE"):
        response = httpx.request(method, live.mcp_url, headers=headers)
        assert response.status_code == 405
        assert response.headers["Allow"] == "POST"

    async def listed(session):
        return (await session.list_tools()).tools

    live.mcp_url += "/"
    assert {tool.name for tool in live.over_http(key, listed)} == TOOLS


def test_concurrent_sessions_each_get_their_own_answers(live, tenant, other_tenant, make_key):
    """Sessions of different keys at once on the threaded live server: each call answers for
    its own key (the request's key never leaks into another request's tool call)."""
    ours, theirs = make_manuals(tenant), make_manuals(other_tenant, name="Theirs")
    keys = {ours.pk: make_key(tenant, scopes=("read",)), theirs.pk: make_key(other_tenant)}

    def session(kb_id: int):
        other = theirs.pk if kb_id == ours.pk else ours.pk

        async def calls(session):
            answers = []
            for _ in range(5):
                answers.append(await session.call_tool("list_knowledge_bases", {}))
                answers.append(
                    await session.call_tool(
                        "search", {"query": QUERY, "knowledge_base_ids": [other]}
                    )
                )
            return kb_id, answers

        return live.over_http(keys[kb_id], calls)

    order = itertools.cycle([ours.pk, theirs.pk])
    lock = threading.Lock()

    def next_session():
        with lock:
            kb_id = next(order)
        return session(kb_id)

    results = at_once(6, next_session)
    for kb_id, answers in results:
        for listed, refused in zip(answers[::2], answers[1::2], strict=True):
            assert [kb["id"] for kb in answer_of(listed)["knowledge_bases"]] == [kb_id]
            assert error_of(refused)["code"] == "not_found"
    assert sorted(kb_id for kb_id, _ in results) == sorted([ours.pk, theirs.pk] * 3)
