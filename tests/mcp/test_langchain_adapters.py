"""langchain-mcp-adapters, as LangGraph agents load MCP servers: the server's tools become
LangChain tools, and one of them searches (no model involved)."""

import json

import anyio
from langchain_mcp_adapters.client import MultiServerMCPClient

from tests.conftest import CEILING_S
from tests.langchain.conftest import make_manuals
from tests.mcp.test_http import QUERY, TOOLS


def test_the_tools_load_into_langchain_and_search(live, tenant, make_key):
    kb = make_manuals(tenant)
    key = make_key(tenant, scopes=("read",))
    client = MultiServerMCPClient(
        {
            "knowledge": {
                "transport": "streamable_http",
                "url": live.mcp_url,
                "headers": {"Authorization": f"Bearer {key}"},
                "timeout": CEILING_S,
            }
        }
    )

    async def run():
        tools = {tool.name: tool for tool in await client.get_tools()}
        found = await tools["search"].ainvoke({"query": QUERY, "knowledge_base_ids": [kb.pk]})
        refused = await tools["search"].ainvoke({"query": QUERY, "knowledge_base_ids": [10**9]})
        return tools, found, refused

    tools, found, refused = anyio.run(run)
    assert set(tools) == TOOLS
    assert "knowledge_base_ids" in tools["search"].args
    answer = json.loads(found[0]["text"] if isinstance(found, list) else found)
    assert answer["results"][0]["document_title"] == "Pump handbook"
    assert "Knowledge base not found." in str(refused)
