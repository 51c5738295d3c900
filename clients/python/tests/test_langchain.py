"""The remote retriever against the live server: LangChain's own standard suite, unchanged, and
the search tool an agent calls."""

from __future__ import annotations

import pytest
from langchain_tests.integration_tests import RetrieversIntegrationTests
from rag_kb_client.langchain import RemoteKnowledgeBaseRetriever, create_search_tool


class TestRemoteKnowledgeBaseRetriever(RetrieversIntegrationTests):
    @pytest.fixture(autouse=True)
    def _server(self, server):
        self.params = {
            "base_url": server.url,
            "api_key": server.api_key,
            "knowledge_base_id": server.knowledge_base_id,
            "timeout": server.timeout,
        }

    @property
    def retriever_constructor(self) -> type[RemoteKnowledgeBaseRetriever]:
        return RemoteKnowledgeBaseRetriever

    @property
    def retriever_constructor_params(self) -> dict:
        return self.params

    @property
    def retriever_query_example(self) -> str:
        return "How often is the temperature sensor calibrated?"


def test_the_search_tool_cites_what_it_found(server):
    retriever = RemoteKnowledgeBaseRetriever(
        base_url=server.url,
        api_key=server.api_key,
        knowledge_base_id=server.knowledge_base_id,
        timeout=server.timeout,
        k=3,
    )
    tool = create_search_tool(retriever, max_chunks=2)
    answer = tool.invoke({"query": "mechanical seal of the P-100 pump"})
    assert answer.startswith("Found 3 relevant chunks; showing 2.\n\n[1] Pump handbook")
    missing = create_search_tool(retriever.model_copy(update={"knowledge_base_ids": [10**9]}))
    assert missing.invoke({"query": "seal"}).startswith("Error: Knowledge base not found.")
