"""The MCP server over stdio: a real ``manage.py mcp --api-key-env NAME`` subprocess on this
test's database, driven by the MCP SDK's own stdio client."""

import subprocess
import sys

import anyio

from tenancy.models import ApiKey
from tenancy.services import revoke_api_key
from tests.conftest import CEILING_S, REPO, subprocess_env
from tests.langchain.conftest import make_manuals
from tests.mcp.conftest import KEY_ENV, answer_of, error_of
from tests.mcp.test_http import QUERY, TOOLS


def test_stdio_lists_searches_like_rest_and_hides_other_knowledge_bases(live, tenant, make_key):
    allowed, hidden = make_manuals(tenant), make_manuals(tenant, name="Hidden")
    key = make_key(tenant, scopes=("read",), kbs=[allowed])
    api_key = ApiKey.objects.get(tenant=tenant)

    async def calls(session):
        tools = (await session.list_tools()).tools
        found = await session.call_tool(
            "search", {"query": QUERY, "knowledge_base_ids": [allowed.pk]}
        )
        refused = await session.call_tool(
            "search", {"query": QUERY, "knowledge_base_ids": [hidden.pk]}
        )
        await anyio.to_thread.run_sync(revoke, api_key)
        after = await session.call_tool("list_knowledge_bases", {})
        return tools, found, refused, after

    tools, found, refused, after = live.over_stdio(key, calls)
    assert {tool.name for tool in tools} == TOOLS
    rest = live.rest(key, f"/knowledge-bases/{allowed.pk}/search", {"query": QUERY})
    # The key is revoked by now: REST refuses it, and so did the next tool call.
    assert rest.status_code == 401
    hits = answer_of(found)["results"]
    assert hits[0]["document_title"] == "Pump handbook"
    assert error_of(refused) == {
        "code": "not_found",
        "message": "Knowledge base not found.",
        "details": {},
    }
    assert error_of(after)["message"] == "This API key has been revoked."


def revoke(api_key: ApiKey) -> None:
    """Revoke while the server runs (from a thread of its own: the session is async)."""
    from django.db import connection

    try:
        revoke_api_key(tenant=api_key.tenant, api_key=api_key)
    finally:
        connection.close()


def test_stdio_hits_are_the_rest_hits(live, tenant, make_key):
    kb = make_manuals(tenant)
    key = make_key(tenant, scopes=("read",))

    async def search(session):
        return await session.call_tool(
            "search", {"query": QUERY, "knowledge_base_ids": [kb.pk], "mode": "keyword"}
        )

    hits = answer_of(live.over_stdio(key, search))["results"]
    rest = live.rest(key, f"/knowledge-bases/{kb.pk}/search", {"query": QUERY, "mode": "keyword"})
    assert [(h["chunk_id"], h["score"]) for h in hits] == [
        (h["chunk_id"], h["score"]) for h in rest.json()["results"]
    ]
    assert hits


def test_a_missing_or_refused_key_stops_the_command_with_a_message(transactional_db, tenant):
    from django.db import connection

    env = subprocess_env(
        DJANGO_SETTINGS_MODULE="rag_project.settings.test",
        RAG_TEST_DB_NAME=connection.settings_dict["NAME"],
    )
    command = [sys.executable, "manage.py", "mcp", "--api-key-env", KEY_ENV]
    for value, message in (
        ("", f"Set the API key in the environment variable {KEY_ENV}."),
        ("rag_nope_nope", f"Invalid API key. (the key in {KEY_ENV})"),
    ):
        done = subprocess.run(
            command,
            cwd=REPO,
            env={**env, KEY_ENV: value},
            capture_output=True,
            text=True,
            timeout=CEILING_S,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 1
        assert message in done.stderr
        assert done.stdout == ""
