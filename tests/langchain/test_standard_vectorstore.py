"""LangChain's own standard suite for vector stores, unchanged, sync and async, against a new
knowledge base of the real ingestion pipeline, PostgreSQL and pgvector."""

import pytest
from langchain_tests.integration_tests import VectorStoreIntegrationTests

from retrieval.langchain import KnowledgeBaseVectorStore


class TestKnowledgeBaseVectorStore(VectorStoreIntegrationTests):
    @pytest.fixture
    def vectorstore(self, db, tenant) -> KnowledgeBaseVectorStore:
        """An empty knowledge base embedded by the suite's own embeddings; each test's
        transaction is rolled back, so the next one starts empty again."""
        return KnowledgeBaseVectorStore.from_texts(
            [], self.get_embeddings(), tenant=tenant, name="Standard suite"
        )
