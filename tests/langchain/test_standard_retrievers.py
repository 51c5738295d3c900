"""LangChain's own standard suite for retrievers, unchanged, for the local retriever and for the
remote one against a live HTTP server of the search API."""

import pytest
from langchain_tests.integration_tests import RetrieversIntegrationTests
from rag_kb_client.langchain import RemoteKnowledgeBaseRetriever

from retrieval.langchain import KnowledgeBaseRetriever
from tests.langchain.conftest import make_manuals


class TestKnowledgeBaseRetriever(RetrieversIntegrationTests):
    @pytest.fixture(autouse=True)
    def _manuals(self, db, tenant):
        self.params = {"tenant": tenant, "knowledge_base_id": make_manuals(tenant).pk}

    @property
    def retriever_constructor(self) -> type[KnowledgeBaseRetriever]:
        return KnowledgeBaseRetriever

    @property
    def retriever_constructor_params(self) -> dict:
        return self.params

    @property
    def retriever_query_example(self) -> str:
        return "How often is the temperature sensor calibrated?"


class TestRemoteKnowledgeBaseRetriever(RetrieversIntegrationTests):
    @pytest.fixture(autouse=True)
    def _api(self, search_api, tenant):
        self.params = {
            "base_url": search_api.url,
            "api_key": search_api.add_key(tenant),
            "knowledge_base_id": make_manuals(tenant).pk,
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
