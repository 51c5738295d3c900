"""Fuzzing the MCP server over HTTP with two tenants' keys (``tests/fuzzing.py``): the tools it
lists, called with arguments generated from their input schemas and hostile values (NaN, 1e999,
huge integers, NUL, unpaired surrogates, the other tenant's ids...), never get a server error or
an internal error, and never answer with anything of the other tenant's. Prints what it sent
(``-s``) and records it (``record_property``)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import httpx
import pytest
from hypothesis import strategies as st

from tests.conftest import CEILING_S
from tests.fuzzing import (
    JSON_VALUES,
    RATES,
    Side,
    as_json,
    fuzz,
    id_pools,
    leaks,
    make_sides,
    mostly,
    report,
    values_of,
)

MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def mcp_post(http: httpx.Client, url: str, raw_key: str, text: str) -> httpx.Response:
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {raw_key}"}
    return http.post(url, content=text, headers=headers)


def rpc(method: str, params: dict) -> dict:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def crosses(arguments: Any, theirs: Side) -> bool:
    """Whether tool arguments ask for the other tenant's knowledge base or document by id."""
    if not isinstance(arguments, dict):
        return False
    kb_ids = arguments.get("knowledge_base_ids")
    return (isinstance(kb_ids, list) and theirs.kb.pk in kb_ids) or arguments.get(
        "document_id"
    ) in {d.pk for d in theirs.documents}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_mcp_tool_calls_of_both_tenants_never_fail_and_never_cross(
    live_server, settings, record_property
):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": RATES}
    a, b = make_sides()
    sides = {"A": (a, b), "B": (b, a)}
    url = f"{live_server.url}/mcp"
    http = httpx.Client(timeout=CEILING_S)
    listed = mcp_post(http, url, a.raw_key, json.dumps(rpc("tools/list", {})))
    tools = {tool["name"]: tool["inputSchema"] for tool in listed.json()["result"]["tools"]}
    pools = id_pools(a, b)
    words = [a.word, b.word]
    arguments = {
        name: mostly(values_of(schema, schema.get("$defs", {}), pools, words), JSON_VALUES)
        for name, schema in tools.items()
    }
    tally: Counter = Counter()

    def check(case) -> None:
        who, (tool, args), literal = case
        mine, theirs = sides[who]
        text = as_json(rpc("tools/call", {"name": tool, "arguments": args}), literal)
        response = mcp_post(http, url, mine.raw_key, text)
        tally["requests"] += 1
        tally[tool] += 1
        assert response.status_code in (200, 400), (response.status_code, response.text[:500])
        found = leaks(response.content, theirs, text)
        assert found == [], (who, tool, args, found, response.text[:500])
        answer = response.json()
        if response.status_code == 400:  # not JSON the API takes (NaN, 1e999...)
            assert answer["error"]["code"] == -32700, answer
            tally["parse_errors"] += 1
            return
        error = answer.get("error")
        if error is not None:  # arguments that are not an object: the SDK's invalid params
            assert error["code"] != -32603, (tool, args, error)
            tally["protocol_errors"] += 1
            return
        result = answer["result"]
        if result.get("isError"):
            code = result["structuredContent"]["error"]["code"]
            assert code != "server_error", (tool, args, result)
            tally["tool_errors"] += 1
        else:
            assert not crosses(args, theirs), (who, tool, args, result)
            tally["answers"] += 1

    calls = st.sampled_from(sorted(tools)).flatmap(
        lambda name: st.tuples(st.just(name), arguments[name])
    )
    fuzz(st.tuples(st.sampled_from(["A", "B"]), calls, st.booleans()), 400, check)
    http.close()

    report(
        record_property,
        "MCP, both tenants' keys",
        tools=len(tools),
        requests=tally["requests"],
        answers=tally["answers"],
        tool_errors=tally["tool_errors"],
        parse_errors=tally["parse_errors"],
        protocol_errors=tally["protocol_errors"],
    )
    assert set(tools) <= {name for name in tally if isinstance(name, str)}, tally
